"""The baby GPT: a GPT with a tiny vocabulary and context is a finite-state Markov chain.

With V tokens and a context of L tokens there are exactly V**L possible inputs ("states").
For each one the model predicts a distribution over the next token; appending that token and
dropping the first gives the next state. So the model *is* a Markov chain over V**L states with
V edges leaving each state. Karpathy's example: V=2, L=3, trained for 50 steps on 111101111011110.

    run = BabyRun.start("111101111011110", BabyConfig())
    for snapshot in run.train():          # one Snapshot per step, the untrained model first
        print(snapshot.step, snapshot.loss)
    probs = run.snapshots[-1].probs()     # (S, V): every state's next-token distribution
    graph = transition_graph(run.space, probs)
    cycle = most_likely_cycle(run.space.transition_matrix(probs))
    analysis = analyse_chain(run.space, probs, run.counts)  # all of it, next to the data

Shapes: S states (V**L), V vocabulary, L context length, N training windows.

Never imports the training loop (`core.train`: the baby GPT's fifty steps are its own), gradio, plotly or `playground`.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from core.config import GPTConfig
from core.model import GPT
from core.optim import configure_optimizer
from core.sample import tempered
from core.tokenizers import CharTokenizer

SYMBOLS = "0123"  # the alphabet of V tokens is its first V symbols
VOCAB_SIZES = (2, 3, 4)
CONTEXT_LENGTHS = (1, 2, 3, 4, 5)
MAX_STATES = 81  # more states than this cannot be drawn legibly
MAX_SEQUENCE = 10_000  # symbols; the whole sequence is one batch every step
EXAMPLE_SEQUENCE = "111101111011110"
# Karpathy's run used PyTorch's AdamW defaults.
ADAM_BETAS = (0.9, 0.999)


@dataclass(frozen=True)
class BabyConfig:
    """Karpathy's baby GPT by default: 4 layers, 4 heads, n_embd 16, no biases, AdamW 1e-3."""

    vocab_size: int = 2  # V
    context_length: int = 3  # L, also the model's block_size: the states are exactly its inputs
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 16
    steps: int = 50
    learning_rate: float = 1e-3
    weight_decay: float = 0.1
    seed: int = 1337

    def __post_init__(self) -> None:
        StateSpace(self.vocab_size, self.context_length)  # validates V, L and the number of states
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {self.steps!r}")
        for name in ("learning_rate", "weight_decay"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        self.gpt_config()  # validates the model sizes (GPTConfig names the field)

    def gpt_config(self) -> GPTConfig:
        # nanoGPT as in the original: no biases anywhere, LM head tied to the token embedding.
        return GPTConfig(
            vocab_size=self.vocab_size, block_size=self.context_length, n_layer=self.n_layer,
            n_head=self.n_head, n_embd=self.n_embd, dropout=0.0, bias=False, qkv_bias=False,
            lm_head_bias=False, tie_weights=True,
        )


@dataclass(frozen=True)
class StateSpace:
    """All V**L contexts, numbered as base-V numbers: state 5 of V=2, L=3 is '101'."""

    vocab_size: int
    context_length: int

    def __post_init__(self) -> None:
        if self.vocab_size not in VOCAB_SIZES:
            raise ValueError(f"vocab_size must be one of {VOCAB_SIZES}, got {self.vocab_size!r}")
        if self.context_length not in CONTEXT_LENGTHS:
            raise ValueError(f"context_length must be one of {CONTEXT_LENGTHS}, got {self.context_length!r}")
        if self.n_states > MAX_STATES:
            raise ValueError(
                f"{self.vocab_size} tokens with a context of {self.context_length} make {self.n_states} states; "
                f"at most {MAX_STATES} can be drawn legibly. Use a smaller vocabulary or a shorter context."
            )

    @property
    def n_states(self) -> int:
        return self.vocab_size**self.context_length

    @property
    def tokenizer(self) -> CharTokenizer:
        return CharTokenizer(SYMBOLS[: self.vocab_size])

    def states(self) -> torch.Tensor:
        """(S, L) token ids of every state, in state order."""
        ids = itertools.product(range(self.vocab_size), repeat=self.context_length)
        return torch.tensor(list(ids), dtype=torch.long)

    def labels(self) -> list[str]:
        decode = self.tokenizer.decode
        return [decode(row) for row in self.states().tolist()]

    def index(self, ids: Sequence[int]) -> int:
        """The state number of L token ids."""
        if len(ids) != self.context_length:
            raise ValueError(f"a state has {self.context_length} tokens, got {len(ids)}")
        state = 0
        for token in ids:
            state = state * self.vocab_size + int(token)
        return state

    def parse_state(self, label: str) -> int:
        """The state number of a label such as '101'."""
        ids = self.tokenizer.encode(label)
        if len(ids) != self.context_length:
            raise ValueError(f"a state is {self.context_length} symbols long, got {label!r}")
        return self.index(ids)

    def next_state(self, state: int, token: int) -> int:
        """Append `token`, drop the oldest: the base-V number shifted left by one digit."""
        return (state * self.vocab_size) % self.n_states + token

    def transition_matrix(self, probs: torch.Tensor) -> torch.Tensor:
        """(S, V) next-token probabilities -> (S, S) state transition matrix (float64)."""
        S, V = self.n_states, self.vocab_size
        if probs.shape != (S, V):
            raise ValueError(f"expected next-token probabilities of shape {(S, V)}, got {tuple(probs.shape)}")
        matrix = torch.zeros(S, S, dtype=torch.float64)
        sources = torch.arange(S)
        for token in range(V):
            targets = (sources * V) % S + token
            matrix[sources, targets] = probs[:, token].double()
        return matrix


# ---------------------------------------------------------------- the model's chain


def next_token_logits(model: GPT, space: StateSpace) -> torch.Tensor:
    """(S, V) next-token logits of every state, from one batched forward pass."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits, _ = model(space.states())  # (S, L, V)
    model.train(was_training)
    return logits[:, -1, :]


def softmax_with_temperature(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Probabilities from logits divided by `temperature` (> 0): low sharpens, high flattens."""
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return F.softmax(tempered(logits.double(), temperature), dim=-1)


def next_token_probs(model: GPT, space: StateSpace, temperature: float = 1.0) -> torch.Tensor:
    """(S, V) next-token distribution of every state; each row sums to 1."""
    return softmax_with_temperature(next_token_logits(model, space), temperature)


@dataclass(frozen=True)
class Edge:
    source: int
    target: int
    token: int
    probability: float


@dataclass(frozen=True)
class TransitionGraph:
    """The chain as a graph: one node per state, V edges out of each (one per next token)."""

    labels: list[str]  # node i is state i
    token_labels: list[str]
    edges: list[Edge]


def transition_graph(space: StateSpace, probs: torch.Tensor) -> TransitionGraph:
    """Nodes and edges of the chain with next-token probabilities `probs` (S, V)."""
    S, V = space.n_states, space.vocab_size
    if probs.shape != (S, V):
        raise ValueError(f"expected next-token probabilities of shape {(S, V)}, got {tuple(probs.shape)}")
    rows = probs.tolist()
    edges = [
        Edge(state, space.next_state(state, token), token, rows[state][token])
        for state in range(S)
        for token in range(V)
    ]
    return TransitionGraph(space.labels(), list(SYMBOLS[:V]), edges)


# ---------------------------------------------------------------- data


def parse_sequence(text: str, vocab_size: int, context_length: int) -> list[int]:
    """A training sequence such as '1111 0111 1011 110' as token ids; whitespace is ignored.

    It may use only the first `vocab_size` symbols and needs at least one window plus its target.
    """
    if not isinstance(text, str):
        raise ValueError(f"the sequence must be text, got {type(text).__name__}")
    StateSpace(vocab_size, context_length)
    symbols = "".join(text.split())
    alphabet = SYMBOLS[:vocab_size]
    for position, symbol in enumerate(symbols):
        if symbol not in alphabet:
            raise ValueError(
                f"with {vocab_size} tokens the sequence may only use {', '.join(alphabet)}; "
                f"found {symbol!r} at position {position + 1}"
            )
    if len(symbols) <= context_length:
        raise ValueError(
            f"the sequence has {len(symbols)} symbols; with a context of {context_length} it needs at least "
            f"{context_length + 1} (one context and the token after it)"
        )
    if len(symbols) > MAX_SEQUENCE:
        raise ValueError(f"the sequence has {len(symbols):,} symbols; the limit is {MAX_SEQUENCE:,}")
    return CharTokenizer(alphabet).encode(symbols)


def training_windows(ids: Sequence[int], context_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every window of L tokens (N, L) and the token after it (N,): N = len(ids) - L."""
    data = torch.tensor(ids, dtype=torch.long)
    n = len(data) - context_length
    if n < 1:
        raise ValueError(f"need more than {context_length} tokens, got {len(data)}")
    windows = data[torch.arange(n)[:, None] + torch.arange(context_length)]  # (N, L)
    return windows, data[context_length:]


def transition_counts(space: StateSpace, ids: Sequence[int]) -> torch.Tensor:
    """(S, V) how often each state is followed by each token in the data."""
    windows, targets = training_windows(ids, space.context_length)
    powers = space.vocab_size ** torch.arange(space.context_length - 1, -1, -1)
    states = (windows * powers).sum(dim=1)  # (N,) base-V numbers
    counts = torch.zeros(space.n_states, space.vocab_size, dtype=torch.long)
    counts.index_put_((states, targets), torch.ones_like(targets), accumulate=True)
    return counts


def unseen_states(counts: torch.Tensor) -> list[int]:
    """States the data never shows as a context (so it says nothing about what follows them)."""
    return (counts.sum(dim=1) == 0).nonzero().flatten().tolist()


def empirical_probs(counts: torch.Tensor) -> torch.Tensor:
    """(S, V) the data's transition frequencies; rows of unseen states are NaN (no data)."""
    totals = counts.sum(dim=1, keepdim=True).double()
    return counts.double() / totals  # 0/0 = NaN for unseen states


def disagreement(probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(S,) total variation distance between the model and the data per state (NaN if unseen)."""
    return 0.5 * (probs.double() - empirical_probs(counts)).abs().sum(dim=1)


def largest_disagreements(probs: torch.Tensor, counts: torch.Tensor, k: int = 3) -> list[int]:
    """The (at most) k seen states where the model differs most from the data, largest first."""
    distance = disagreement(probs, counts).nan_to_num(nan=-1.0)  # unseen states last
    order = distance.argsort(descending=True, stable=True)[:k].tolist()
    return [state for state in order if distance[state] >= 0]


# ---------------------------------------------------------------- training


@dataclass(frozen=True)
class Snapshot:
    """The chain after `step` optimizer steps: its loss on the training windows and its logits."""

    step: int
    loss: float
    logits: torch.Tensor  # (S, V) next-token logits of every state

    def probs(self, temperature: float = 1.0) -> torch.Tensor:
        return softmax_with_temperature(self.logits, temperature)


def new_model(config: BabyConfig) -> GPT:
    """A freshly initialised baby GPT whose weights depend only on `config.seed`."""
    return GPT(config.gpt_config(), generator=torch.Generator().manual_seed(config.seed))


@dataclass
class BabyRun:
    """A baby GPT, its training sequence, and the snapshots of its training so far."""

    config: BabyConfig
    space: StateSpace
    ids: list[int]
    model: GPT
    snapshots: list[Snapshot] = field(default_factory=list)

    @classmethod
    def start(cls, sequence: str, config: BabyConfig) -> "BabyRun":
        """Check the sequence and build an untrained model (raises ValueError with a user message)."""
        space = StateSpace(config.vocab_size, config.context_length)
        ids = parse_sequence(sequence, config.vocab_size, config.context_length)
        return cls(config, space, ids, new_model(config))

    @functools.cached_property
    def counts(self) -> torch.Tensor:
        """(S, V) the transitions of the training sequence."""
        return transition_counts(self.space, self.ids)

    def snapshot(self, step: int) -> Snapshot:
        """The snapshot after `step` steps (the latest one for steps not reached)."""
        if not self.snapshots:
            raise ValueError("this run has no snapshots yet: train it first")
        return self.snapshots[max(0, min(step, len(self.snapshots) - 1))]

    def train(self) -> Iterator[Snapshot]:
        """Full-batch training on every window, loss at the last position only, as in the original.

        Yields `config.steps + 1` snapshots (the untrained model first) and keeps them in
        `self.snapshots`. Each step is a single forward pass over the training windows and all
        states together: the states' rows give the snapshot, the windows' rows the loss.
        """
        if self.snapshots:
            raise ValueError("this run has already trained; start a new run to train again")
        S, L = self.space.n_states, self.space.context_length
        windows, targets = training_windows(self.ids, L)
        inputs = torch.cat([self.space.states(), windows])  # (S + N, L)
        # Only the last position of each training window counts (-1 is ignored by the loss).
        labels = torch.full(inputs.shape, -1, dtype=torch.long)
        labels[S:, -1] = targets
        optimizer = configure_optimizer(
            self.model, self.config.learning_rate, self.config.weight_decay, ADAM_BETAS
        )
        self.model.train()
        for step in range(self.config.steps + 1):
            last = step == self.config.steps
            with torch.set_grad_enabled(not last):
                logits, loss = self.model(inputs, labels)  # (S + N, L, V)
            snapshot = Snapshot(step, loss.item(), logits[:S, -1].detach().clone())
            if not last:
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            self.snapshots.append(snapshot)
            yield snapshot


# ---------------------------------------------------------------- chain analysis


def _check_stochastic(matrix: torch.Tensor) -> torch.Tensor:
    matrix = matrix.double()
    if matrix.dim() != 2 or matrix.size(0) != matrix.size(1):
        raise ValueError(f"a transition matrix is square, got shape {tuple(matrix.shape)}")
    if (matrix < 0).any() or not torch.allclose(matrix.sum(dim=1), torch.ones(len(matrix), dtype=torch.float64)):
        raise ValueError("every row of a transition matrix must be probabilities summing to 1")
    return matrix


def stationary_distribution(matrix: torch.Tensor) -> torch.Tensor:
    """(S,) the long-run share of time in each state, starting from a uniform state.

    Repeated squaring of the lazy chain (I + P) / 2, which has the same stationary
    distributions as P but is never periodic, so its powers converge for every chain.
    """
    matrix = _check_stochastic(matrix)
    power = 0.5 * (torch.eye(len(matrix), dtype=torch.float64) + matrix)
    for _ in range(64):  # power becomes the lazy chain to the 2**64th
        power = power @ power
        power = power / power.sum(dim=1, keepdim=True)  # keep rounding from drifting
    return power.mean(dim=0)  # a uniform start distribution times the limit


def mean_step_probability(matrix: torch.Tensor, cycle: list[int]) -> float:
    """The geometric mean of the probabilities of a cycle's edges: its probability per step."""
    sources = torch.tensor(cycle)
    targets = torch.roll(sources, -1)
    return matrix[sources, targets].double().log().mean().exp().item()


def most_likely_cycle(matrix: torch.Tensor) -> list[int]:
    """The cycle of states with the highest probability per step (see `mean_step_probability`).

    Karp's maximum mean cycle on log-probabilities: best[k, v] is the highest total
    log-probability of a walk of exactly k steps ending in v. A best walk of S steps contains a
    best cycle, so we take the walk into Karp's optimal end state apart into its simple cycles
    and keep the most likely one. Rotated to start from its lowest state.
    """
    weights = _check_stochastic(matrix).log()  # (S, S); log 0 = -inf: no edge
    S = len(weights)
    best = torch.full((S + 1, S), -math.inf, dtype=torch.float64)
    best[0] = 0.0  # a walk may start anywhere
    parent = torch.zeros(S + 1, S, dtype=torch.long)
    for k in range(1, S + 1):
        best[k], parent[k] = (best[k - 1][:, None] + weights).max(dim=0)

    # Karp: the maximum cycle mean is max_v min_k (best[S, v] - best[k, v]) / (S - k).
    means = (best[S] - best[:S]) / torch.arange(S, 0, -1, dtype=torch.float64)[:, None]  # (S, S)
    worst = means.nan_to_num(nan=math.inf, posinf=math.inf, neginf=-math.inf).min(dim=0).values
    worst[best[S] == -math.inf] = -math.inf  # no walk of S steps ends there
    walk = [int(worst.argmax())]
    for k in range(S, 0, -1):
        walk.append(int(parent[k, walk[-1]]))
    walk.reverse()  # S + 1 states, so some state repeats

    cycles, stack, position = [], [], {}
    for state in walk:  # split the walk into simple cycles as states repeat
        if state in position:
            start = position[state]
            cycles.append(stack[start:])
            for removed in stack[start:]:
                del position[removed]
            del stack[start:]
        position[state] = len(stack)
        stack.append(state)
    cycle = max(cycles, key=lambda c: mean_step_probability(matrix, c))
    first = cycle.index(min(cycle))
    return cycle[first:] + cycle[:first]


def entropy_bits(probs: torch.Tensor) -> torch.Tensor:
    """(S,) the entropy of each state's next-token distribution in bits (0 = certain)."""
    probs = probs.double()
    return -(probs * probs.clamp_min(1e-300).log2()).sum(dim=-1)


def sample_walk(
    space: StateSpace, probs: torch.Tensor, start: int, steps: int, generator: torch.Generator | None = None
) -> list[int]:
    """A random walk of `steps` transitions from state `start`: a list of steps + 1 states."""
    if not 0 <= start < space.n_states:
        raise ValueError(f"start state must be in 0..{space.n_states - 1}, got {start}")
    if steps < 0:
        raise ValueError(f"steps must be non-negative, got {steps}")
    cumulative = probs.double().cumsum(dim=1)  # (S, V)
    draws = torch.rand(steps, generator=generator, dtype=torch.float64)
    walk = [start]
    for u in draws:
        row = cumulative[walk[-1]]
        token = min(int(torch.searchsorted(row, u * row[-1], right=True)), space.vocab_size - 1)
        walk.append(space.next_state(walk[-1], token))
    return walk


@dataclass(frozen=True)
class ChainAnalysis:
    """Everything there is to say about one chain next to its training data. (S,) per state."""

    probs: torch.Tensor  # (S, V) the model's next-token probabilities
    data_probs: torch.Tensor  # (S, V) the data's transition frequencies (NaN rows: unseen)
    counts: torch.Tensor  # (S, V) transitions in the data
    unseen: list[int]
    disagreement: torch.Tensor  # total variation distance model vs data (NaN: unseen)
    most_disagreeing: list[int]  # a few seen states, largest disagreement first
    entropy: torch.Tensor  # bits
    stationary: torch.Tensor
    cycle: list[int]  # the most likely cycle
    cycle_probability: float  # its probability per step


def analyse_chain(space: StateSpace, probs: torch.Tensor, counts: torch.Tensor, top: int = 3) -> ChainAnalysis:
    matrix = space.transition_matrix(probs)
    cycle = most_likely_cycle(matrix)
    return ChainAnalysis(
        probs=probs, data_probs=empirical_probs(counts), counts=counts, unseen=unseen_states(counts),
        disagreement=disagreement(probs, counts), most_disagreeing=largest_disagreements(probs, counts, top),
        entropy=entropy_bits(probs), stationary=stationary_distribution(matrix),
        cycle=cycle, cycle_probability=mean_step_probability(matrix, cycle),
    )
