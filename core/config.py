"""The configurations: a model's (`GPTConfig`) and a training run's (`TrainConfig`), each validated
when made, and the seeds' teaching progression as named stages of one model (`STAGES`).

Imports the device names only. Never imports the model, the training loop, gradio, plotly or `playground`:
everything else is built from these.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from core.device import DTYPES

# The feed-forward's activation. "gelu_tanh": GELU through tanh, the approximation GPT-2 was trained
# with (Hugging Face calls it "gelu_new"); pretrained GPT-2 weights need it to give GPT-2's outputs.
# "swiglu": Llama's gated layer, SiLU(x W_gate) * (x W_up), with a hidden size of about 8/3 n_embd
# (instead of 4 n_embd) so that its three matrices hold about as many weights as GELU's two.
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "swiglu")
# Where a token learns its position. "learned": GPT-2's table of position embeddings added to the
# token's; "rope": each head's query and key rotated by an angle proportional to the position
# (Su et al. 2021; Llama), so q.k depends on the distance alone; "alibi": no embedding, a fixed
# penalty on the scores that grows linearly with the distance, one slope per head (Press et al. 2022);
# "none": nothing, only the causal mask leaks some order.
POSITIONS = ("learned", "rope", "alibi", "none")
NORMS = ("layernorm", "rmsnorm")  # RMSNorm: Llama's, no mean subtraction and no bias
# How the weights start. "gpt2": N(0, 0.02), the projections into the residual stream scaled down
# (GPT-2, nanoGPT). "pytorch": PyTorch's own layer defaults, which the lecture's early stages use:
# embeddings N(0, 1), Linear weights U(+-1/sqrt(fan_in)). Without residual connections the small
# GPT-2 weights shrink the signal about 50-fold per layer and the model cannot start learning.
INITS = ("gpt2", "pytorch")


@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 64  # longest context the model can see (learned positions)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True  # biases in Linear layers and LayerNorms
    qkv_bias: bool = True  # bias of the query/key/value projection, separate as in the seeds
    lm_head_bias: bool = True  # GPT-2 has none; Karpathy's lecture model has one
    activation: str = "gelu"
    tie_weights: bool = False  # share token embedding and LM head weights (GPT-2 does)
    init: str = "gpt2"  # see INITS
    # Today's parts (Llama and its family); the defaults are GPT-2's.
    position: str = "learned"  # see POSITIONS
    rope_base: float = 10000.0  # RoPE's base: pair i of a head's channels turns by position * base^(-2i / D)
    norm: str = "layernorm"  # see NORMS
    norm_eps: float = 1e-5
    n_kv_head: int | None = None  # key/value heads that query heads share in groups (1: multi-query); None = n_head
    window: int | None = None  # sliding window: a query sees at most this many keys, itself included; None = all
    mlp_hidden: int | None = None  # the feed-forward's hidden size; None = 4 n_embd, or about 8/3 n_embd for swiglu
    # The seeds' progression: each switch removes one idea from the full GPT (positions: position="none";
    # the stages after "+ position embeddings" keep whichever scheme the config has).
    use_attention: bool = True
    use_feed_forward: bool = True
    use_residual: bool = True  # residual connections + pre-LayerNorm (and the final LayerNorm)
    # Break-it switches: each removes something attention needs, to see what goes wrong.
    causal: bool = True  # False: no mask, every token sees the whole window, the future included
    scale_attention: bool = True  # False: scores are not divided by sqrt(head size); the softmax saturates

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.n_layer, int) or isinstance(self.n_layer, bool) or self.n_layer < 0:
            raise ValueError(f"n_layer must be a non-negative integer, got {self.n_layer!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})"
            )
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        for field in dataclasses.fields(self):
            if field.type in ("bool", bool) and not isinstance(getattr(self, field.name), bool):
                raise ValueError(f"{field.name} must be True or False, got {getattr(self, field.name)!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        for name, allowed in (("activation", ACTIVATIONS), ("position", POSITIONS), ("norm", NORMS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("rope_base", "norm_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("n_kv_head", "window", "mlp_hidden"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if self.n_head % self.kv_heads != 0:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.n_kv_head}): "
                             "query heads share key/value heads in equal groups")
        if self.position == "rope" and self.head_size % 2:
            raise ValueError(f"rotary positions turn pairs of channels: the head size ({self.head_size}) must be even")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_head, or one per query head (multi-head attention, GPT-2)."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def use_position_embedding(self) -> bool:
        """Whether a token knows its position at all (the Train tab's break-it switch reads this)."""
        return self.position != "none"

    @property
    def max_length(self) -> int | None:
        """The most tokens the model can read at once: its position table's rows with learned positions;
        no limit where positions are computed (RoPE, ALiBi) or absent, though past `block_size` the
        model meets distances it never trained on."""
        return self.block_size if self.position == "learned" else None

    @property
    def ffn_hidden(self) -> int:
        """The feed-forward's hidden size: `mlp_hidden`, else 4 n_embd, or for SwiGLU's three matrices
        8/3 n_embd rounded up to a multiple of 8 (3 x 8/3 = 8 n_embd^2 weights, as GELU's 2 x 4)."""
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        return 8 * math.ceil(8 * self.n_embd / 3 / 8) if self.activation == "swiglu" else 4 * self.n_embd

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "GPTConfig":
        values = dict(values)
        if "use_position_embedding" in values:  # checkpoints written before `position` existed
            legacy = values.pop("use_position_embedding")
            if legacy not in (True, False):
                raise ValueError(f"use_position_embedding must be true or false, got {legacy!r}")
            values.setdefault("position", "learned" if legacy else "none")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown GPTConfig fields: {sorted(unknown)}")
        return cls(**values)


@dataclass(frozen=True)
class Stage:
    """One rung of the seeds' ladder: the options of the one GPT model that it turns on."""

    title: str
    description: str  # what the rung adds, and what to expect of it
    options: dict  # GPTConfig fields; they win over the sizes a caller passes
    # The validation loss Karpathy's lecture prints for this rung (its video: context 8, batch 32,
    # n_embd 32, 5,000 steps; the residual rung is three blocks); None where it prints none.
    lecture_loss: float | None


# Before residual connections the stages are built as the lecture builds them: one layer, with
# PyTorch's initialisation. (A stack of blocks without residual connections does not train; with
# GPT-2's small initial weights not even one layer does: the signal shrinks about 50-fold.)
_LECTURE_EARLY = dict(use_residual=False, n_layer=1, init="pytorch")

# The order in which Karpathy's "Let's build GPT" adds ideas to a bigram model.
STAGES: dict[str, Stage] = {
    "bigram": Stage(
        "Bigram", "each token predicts the next from its own embedding alone.",
        dict(position="none", use_attention=False, use_feed_forward=False, **_LECTURE_EARLY), 2.48,
    ),
    "positions": Stage(
        "+ position embeddings",
        "the model knows where a token sits, but tokens still cannot talk: no better than the bigram yet.",
        dict(position="learned", use_attention=False, use_feed_forward=False, **_LECTURE_EARLY), None,
    ),
    "one_head": Stage(
        "+ one self-attention head", "tokens gather information from earlier tokens.",
        dict(use_attention=True, use_feed_forward=False, n_head=1, **_LECTURE_EARLY),
        2.40,
    ),
    "multi_head": Stage(
        "+ multi-head attention", "several smaller heads look for different things in parallel.",
        dict(use_attention=True, use_feed_forward=False, **_LECTURE_EARLY), 2.28,
    ),
    "feed_forward": Stage(
        "+ feed-forward", "each token thinks about what it gathered.",
        dict(use_attention=True, use_feed_forward=True, **_LECTURE_EARLY), 2.24,
    ),
    "gpt": Stage(
        "+ residual connections and LayerNorm", "the full GPT: blocks stack, and deeper trains better.",
        dict(use_attention=True, use_feed_forward=True, use_residual=True), 2.08,
    ),
}


# What makes a block Llama-style, beyond the GPT: rotary positions, RMSNorm and a SwiGLU feed-forward.
# (Grouped key/value heads are left out: Llama 1 and Llama 2 7B have none, and at a given size they
# save cache memory, not loss.) The llama-style preset and the Ladder's last rung both build on it.
LLAMA_PARTS = dict(position="rope", norm="rmsnorm", activation="swiglu")


def stage_config(stage: str, **fields) -> GPTConfig:
    """A GPTConfig for one stage of the seeds' progression; `fields` set the sizes.

    >>> stage_config("one_head", vocab_size=65, n_embd=32).n_head
    1
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    return GPTConfig(**{**fields, **STAGES[stage].options})


def stage_of(config: GPTConfig) -> str | None:
    """The name of the first stage whose options `config` has (so one head is `one_head`, not
    `multi_head`), or None for a custom mix."""
    for name, stage in STAGES.items():
        if all(getattr(config, key) == value for key, value in stage.options.items()):
            return name
    return None


@dataclass
class TrainConfig:
    max_iters: int = 2000
    batch_size: int = 12  # rows of the global batch: one optimizer step's, across all processes (DDP)
    # Rows per forward pass; the gradients of a process's micro-batches add up before the step
    # (gradient accumulation), so memory bounds the micro-batch, not the batch. 0: a process's whole
    # share of the batch at once (batch_size / processes).
    micro_batch_size: int = 0
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int = 2000
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # 0 = no clipping
    eval_interval: int = 250
    eval_iters: int = 20
    seed: int = 1337
    sample_interval: int = 0  # 0 = no live samples
    sample_tokens: int = 100
    attention_interval: int = 0  # 0 = no attention snapshots
    device: str = "auto"  # 'auto' = cuda > mps > cpu
    compile: bool = False
    # On CUDA: replay each step's forward and backward as two CUDA graphs (captured at the first step)
    # instead of launching their ~hundreds of kernels one by one from Python, which a small model's step
    # waits on more than on the GPU's arithmetic. Fixed batch shapes only; not with compile or DDP.
    cuda_graphs: bool = False
    dtype: str = "auto"  # autocast: 'auto' = bfloat16 where it is faster (see autocast_dtype)
    # Train (and evaluate) on a task corpus's answers only (core.data.answer_mask): its questions
    # are random, and their gradients are noise that delays learning the answers about two-fold.
    answers_only: bool = False

    def __post_init__(self) -> None:
        positive = ("max_iters", "batch_size", "eval_interval", "eval_iters")
        non_negative = ("micro_batch_size", "warmup_iters", "lr_decay_iters", "seed", "sample_interval",
                        "sample_tokens", "attention_interval")
        for name in positive + non_negative:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (name in positive):
                kind = "a positive" if name in positive else "a non-negative"
                raise ValueError(f"{name} must be {kind} integer, got {value!r}")
        for name in ("learning_rate", "min_lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.learning_rate == 0:
            raise ValueError("learning_rate must be > 0")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if self.device not in ("auto", "cpu", "mps") and not str(self.device).startswith("cuda"):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda[:N]' or 'mps', got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        for name in ("compile", "cuda_graphs", "answers_only"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.cuda_graphs and self.compile:
            raise ValueError("cuda_graphs and compile are two ways to the same end: choose one")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
