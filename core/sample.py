"""Text generation: temperature, top-k, top-p, a seed, a KV cache, and a streaming twin.

    ids = generate(model, idx, 200, temperature=0.8, top_k=50, seed=1)   # (B, T + 200)
    for step in stream(model, tokenizer, prompt_ids, 200):               # one TokenStep per token
        print(step.text, end="")

Contexts longer than the model's window. Positions are learned and absolute, so sliding the
window by one token would move every position and invalidate the whole KV cache. Instead,
when the window is full the generator drops the oldest half of it: it keeps the newest
ceil(block_size / 2) tokens, rebuilds the cache from them (their positions restart at 0),
and then continues one token at a time until the window is full again. One function,
`window_start`, decides the window for every step, and the no-cache path feeds the model
exactly the same windows, so greedy decoding gives identical tokens with and without the
cache. The cached path costs one re-prefill per block_size / 2 new tokens instead of one
full forward per token.

Stopping early: `stop_tokens` ends the text at the first of them the model writes (that token
included), e.g. a task model's newline, which ends its answer line; without them it writes
`max_new_tokens` tokens whatever they are.

Randomness: `seed` makes a fresh generator; otherwise a caller's `generator` (e.g. one per
session) is used; with neither, torch's global RNG. Temperature 0 means greedy.

Imports the model and the tokenizers. Never imports the training loop, gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from core.model import GPT, KVCache
from core.tokenizers import Tokenizer

MAX_NEW_TOKENS = 100_000  # a sanity bound; a typo should not tie up a server for hours


@dataclass
class TokenStep:
    token_id: int
    text: str  # what this token adds to the decoded output ('' while a multi-byte character is incomplete)
    prob: float  # the model's probability of this token (softmax of `tempered` logits)
    alternatives: list[tuple[int, str, float]]  # the top (id, label, prob) candidates, incl. the chosen one


def window_start(length: int, start: int, block_size: int) -> int:
    """Where the model's context begins for a sequence of `length` tokens whose window began at `start`.

    The window stays put while it fits; when it overflows, it jumps forward to keep only the
    newest ceil(block_size / 2) tokens. Both decoding paths call this, so they see the same windows.
    """
    if length - start <= block_size:
        return start
    return length - (block_size - block_size // 2)


class _Context:
    """Feeds the model the current window and returns the next-token logits, with or without a cache."""

    def __init__(self, model: GPT, prompt_length: int, use_cache: bool) -> None:
        self.model = model
        self.block_size = model.config.block_size
        self.start = max(0, prompt_length - self.block_size)  # a long prompt keeps its newest tokens
        # The cache counts positions through attention's keys: a model without attention (the
        # bigram and positions stages) has nothing to cache and would lose track of positions.
        # Without the causal mask a token's keys change as later tokens arrive: nothing stays valid.
        self.use_cache = use_cache and model.config.causal and any(block.attn is not None for block in model.blocks)
        self.cache: KVCache | None = None

    def next_logits(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) -> logits (B, vocab) for the token after idx[:, -1]."""
        start = window_start(idx.size(1), self.start, self.block_size)
        if not self.use_cache:
            self.start = start
            logits, _ = self.model(idx[:, start:])
        elif self.cache is None or start != self.start:
            self.start, self.cache = start, self.model.new_cache()
            logits, _ = self.model(idx[:, start:], cache=self.cache)  # (re-)prefill the window
        else:
            logits, _ = self.model(idx[:, -1:], cache=self.cache)  # one new position
        return logits[:, -1, :].float()


def check_sampling(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise ValueError with a clear message for arguments that cannot work."""
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or not 0 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be an integer from 0 to {MAX_NEW_TOKENS:,}, got {max_new_tokens!r}")
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and (not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")


def check_stop_tokens(stop_tokens: Collection[int], vocab_size: int) -> frozenset[int]:
    """The stop tokens as a set, each checked to be a token id of the vocabulary (ValueError otherwise)."""
    if isinstance(stop_tokens, (str, bytes)) or not isinstance(stop_tokens, Collection):
        raise ValueError(f"stop_tokens must be a collection of token ids, got {stop_tokens!r}")
    if any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < vocab_size for i in stop_tokens):
        raise ValueError(f"stop tokens must be token ids in [0, {vocab_size})")
    return frozenset(stop_tokens)


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logits divided by `temperature` (> 0), finite for any temperature however small.

    The largest logit is moved to 0 first, so dividing cannot overflow: a tiny temperature sends the
    others to -inf and the softmax tends to greedy. The temperature is floored at the dtype's smallest
    normal number because a float64 one such as 1e-300 would round to 0 in float32 (and 0 / 0 is NaN).
    """
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    return shifted / max(temperature, torch.finfo(logits.dtype).tiny)


def sampling_probs(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """(B, V) logits -> (B, V) probabilities to draw from: tempered, then top-k, then top-p filtered."""
    logits = tempered(logits, temperature)
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token when the tokens before it already reach top_p (the first always stays).
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return F.softmax(logits, dim=-1)


def _choose(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """(B, V) logits -> (B, 1) next token ids."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = sampling_probs(logits, temperature, top_k, top_p)
    device = generator.device if generator is not None else probs.device
    return torch.multinomial(probs.to(device), 1, generator=generator).to(logits.device)


def _generator(seed: int | None, generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return generator
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer or None, got {seed!r}")
    return torch.Generator(device=device).manual_seed(seed)


@contextlib.contextmanager
def _eval_mode(model: GPT):
    """Dropout off while generating; the model's previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def generate(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    stop_tokens: Collection[int] = (),
) -> torch.Tensor:
    """Continue each row of idx (B, T) by `max_new_tokens` tokens -> (B, T + max_new_tokens).

    With `stop_tokens`, fewer once every row has written one of them: a row that stopped earlier
    goes on with the others (the tensor stays rectangular), so cut each row at its first stop token.
    """
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    stop = check_stop_tokens(stop_tokens, model.config.vocab_size)
    if idx.dim() != 2 or idx.size(1) == 0:
        raise ValueError(f"idx must be a (B, T) tensor with T >= 1, got shape {tuple(idx.shape)}")
    generator = _generator(seed, generator, idx.device)
    context = _Context(model, idx.size(1), use_cache)
    stopped = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)  # (B,) rows that wrote a stop token
    stop_ids = torch.tensor(sorted(stop), dtype=torch.long, device=idx.device)
    with _eval_mode(model):
        for _ in range(max_new_tokens):
            next_id = _choose(context.next_logits(idx), temperature, top_k, top_p, generator)
            idx = torch.cat([idx, next_id], dim=1)  # (B, T + 1)
            stopped |= torch.isin(next_id[:, 0], stop_ids)
            if stopped.all():
                break
    return idx


@torch.no_grad()
def stream(
    model: GPT,
    tokenizer: Tokenizer,
    prompt_ids: list[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    n_alternatives: int = 5,
    stop_tokens: Collection[int] = (),
) -> Iterator[TokenStep]:
    """Generate one token at a time, each with its probability and the top alternatives; the first of
    `stop_tokens` written is the last step.

    Concatenating the steps' `text` gives the decoded continuation, also for byte-level BPE
    tokens that split a character (the text appears once the character is complete).
    """
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    vocab_size = model.config.vocab_size
    if not prompt_ids:
        raise ValueError("the prompt is empty: give at least one token")
    if any(not isinstance(i, int) or not 0 <= i < vocab_size for i in prompt_ids):
        raise ValueError(f"prompt token ids must be integers in [0, {vocab_size})")
    if not isinstance(n_alternatives, int) or n_alternatives < 1:
        raise ValueError(f"n_alternatives must be a positive integer, got {n_alternatives!r}")
    stop = check_stop_tokens(stop_tokens, vocab_size)

    device = next(model.parameters()).device
    generator = _generator(seed, generator, device)
    idx = torch.tensor([prompt_ids], dtype=torch.long, device=device)  # (1, T)
    context = _Context(model, idx.size(1), use_cache)
    new_ids: list[int] = []
    shown = ""  # decoded text handed out so far
    with _eval_mode(model):
        for _ in range(max_new_tokens):
            logits = context.next_logits(idx)  # (1, V)
            next_id = _choose(logits, temperature, top_k, top_p, generator)
            idx = torch.cat([idx, next_id], dim=1)
            token_id = next_id.item()
            new_ids.append(token_id)

            probs = F.softmax(tempered(logits[0], temperature or 1.0), dim=-1)  # what the model thought
            top = torch.topk(probs, min(n_alternatives, vocab_size))
            alternatives = [(i, tokenizer.token_label(i), p) for i, p in zip(top.indices.tolist(), top.values.tolist())]
            if token_id not in top.indices.tolist():
                alternatives.append((token_id, tokenizer.token_label(token_id), probs[token_id].item()))

            # Hold back a trailing incomplete UTF-8 character (decoded as U+FFFD) until it completes.
            decoded = tokenizer.decode(new_ids).rstrip("\ufffd")
            text, shown = decoded[len(shown):], decoded
            yield TokenStep(token_id, text, probs[token_id].item(), alternatives)
            if token_id in stop:
                return


def answer_questions(model: GPT, tokenizer: Tokenizer, ids: list[int], answer_tokens: tuple[int, int],
                     max_tokens: int, *, generator: torch.Generator | None = None) -> str:
    """A task corpus's lines in `ids` (separator and newline as `answer_tokens`): each line's question,
    then what the model writes after it up to its newline, one line each, about `max_tokens` tokens in all.

    Each prompt is the newline before its line, then the question: trained windows hold a line's start,
    and the copying heads find the question by it.
    """
    separator, newline = answer_tokens
    block_size = model.config.block_size
    device = next(model.parameters()).device
    lines, written = [], 0
    starts = [i + 1 for i, token in enumerate(ids) if token == newline]
    for start, end in zip(starts, starts[1:]):
        line = ids[start - 1:end]
        if written >= max_tokens:
            break
        if separator not in line:
            continue
        question = line[: line.index(separator) + 1]
        answer_length = min(len(line) - len(question), block_size - len(question))
        if answer_length < 1:
            continue
        prompt = torch.tensor([question], device=device)
        answer = generate(model, prompt, answer_length, generator=generator,
                          stop_tokens=[newline])[0, len(question):].tolist()
        answer = answer[: answer.index(newline)] if newline in answer else answer  # the line ends there
        lines.append(tokenizer.decode(question[1:] + answer))
        written += len(question) + len(answer)
    return "\n".join(lines)
