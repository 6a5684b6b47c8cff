"""What every analysis of a model checks before it runs it (a head, a text, a token), and the one way
it runs it: eval mode, no gradients, the model's mode restored after.

`core.attention`, `core.interventions` and `core.attribution` share these, so a request that names a
head or a token past the model's size gets the same clear ValueError from each.

Imports the model. Never imports the training loop, gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from core.model import GPT


def check_attention(model: GPT) -> None:
    """Refuse a model with no attention layers (a stage that leaves attention out)."""
    if not model.blocks or model.blocks[0].attn is None:
        raise ValueError("this model has no attention layers (its stage leaves attention out)")


def check_head(model: GPT, layer: int, head: int) -> None:
    """Refuse a (layer, head) the model does not have."""
    n_layer, n_head = len(model.blocks), model.config.n_head
    for name, value, count in (("layer", layer, n_layer), ("head", head, n_head)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
            raise ValueError(f"{name} must be 0 to {count - 1}, got {value!r}")
    check_attention(model)


def check_token(model: GPT, name: str, token: int) -> int:
    """`token` if it is an id in the model's vocabulary; `name` says which token in the error."""
    vocab = model.config.vocab_size
    if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < vocab:
        raise ValueError(f"{name} must be a token id from 0 to {vocab - 1}, got {token!r}")
    return token


def ids_tensor(model: GPT, ids: list[int]) -> torch.Tensor:
    """One text as a (1, T) batch on the model's device, refused if empty or longer than its context."""
    if not ids:
        raise ValueError("the text has no tokens")
    model.check_length(len(ids))
    return torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device)  # (1, T)


@contextlib.contextmanager
def evaluating(model: GPT) -> Iterator[None]:
    """Eval mode (no dropout) and no gradients inside; the model's mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
