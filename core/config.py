"""Model configuration, its validation, and the seeds' teaching progression as named stages."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

ACTIVATIONS = ("gelu", "relu")


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
    # The seeds' progression: each switch removes one idea from the full GPT.
    use_position_embedding: bool = True
    use_attention: bool = True
    use_feed_forward: bool = True
    use_residual: bool = True  # residual connections + pre-LayerNorm (and the final LayerNorm)

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
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {ACTIVATIONS}, got {self.activation!r}"
            )

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "GPTConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown GPTConfig fields: {sorted(unknown)}")
        return cls(**values)


# The order in which Karpathy's "Let's build GPT" adds ideas to a bigram model.
# Each stage is the options of the one GPT model that it turns on.
STAGES: dict[str, dict] = {
    "bigram": dict(
        use_position_embedding=False, use_attention=False, use_feed_forward=False, use_residual=False
    ),
    "positions": dict(
        use_position_embedding=True, use_attention=False, use_feed_forward=False, use_residual=False
    ),
    "one_head": dict(
        use_position_embedding=True, use_attention=True, use_feed_forward=False, use_residual=False, n_head=1
    ),
    "multi_head": dict(
        use_position_embedding=True, use_attention=True, use_feed_forward=False, use_residual=False
    ),
    "feed_forward": dict(
        use_position_embedding=True, use_attention=True, use_feed_forward=True, use_residual=False
    ),
    "gpt": dict(
        use_position_embedding=True, use_attention=True, use_feed_forward=True, use_residual=True
    ),
}

STAGE_DESCRIPTIONS: dict[str, str] = {
    "bigram": "Bigram: each token predicts the next from its own embedding alone.",
    "positions": "+ position embeddings: the model knows where a token sits, but tokens still cannot talk.",
    "one_head": "+ one self-attention head: tokens gather information from earlier tokens.",
    "multi_head": "+ multi-head attention: several heads look for different things in parallel.",
    "feed_forward": "+ feed-forward: each token thinks about what it gathered.",
    "gpt": "+ residual connections and LayerNorm: the full GPT, trainable when deep.",
}


def stage_config(stage: str, **fields) -> GPTConfig:
    """A GPTConfig for one stage of the seeds' progression; `fields` set the sizes.

    >>> stage_config("one_head", vocab_size=65, n_embd=32).n_head
    1
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    return GPTConfig(**{**fields, **STAGES[stage]})


def stage_of(config: GPTConfig) -> str | None:
    """The name of the stage whose switches `config` has, or None for a custom mix."""
    for name, options in STAGES.items():
        if all(getattr(config, key) == value for key, value in options.items() if key != "n_head"):
            if name == "one_head" and config.n_head != 1:
                continue
            if name == "multi_head" and config.n_head == 1:
                continue
            return name
    return None
