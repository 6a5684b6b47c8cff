"""Server-side checks of every input: the browser's sliders are no guarantee (raw HTTP can send
NaN, 1e9 or a string). Each check returns the clean value or raises gr.Error naming the field.

    n_layer = validate.integer(n_layer, "Layers", 1, settings.max_layers, cap=settings.cap_hint("max_layers"))
    lr = validate.number(lr, "Learning rate", 1e-6, 1.0)
    prompt = validate.text(prompt, "Prompt", settings.max_prompt_chars, allow_empty=True)
    corpus = validate.choice(corpus, "Corpus", list(CORPORA))

    with validate.user_errors():     # core's ValueError/DataError/CheckpointError -> gr.Error
        data = TokenData.from_text(text, tokenizer, block_size)

Never imports core's model or a tab: the checks take plain values and name the field.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
from collections.abc import Iterable, Iterator

import gradio as gr


def number(value, name: str, low: float | None = None, high: float | None = None, *, cap: str = "") -> float:
    """A finite real number in [low, high]; `cap` (a settings.cap_hint) is added when over `high`."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise gr.Error(f"{name} must be a number, got {_shown(value)}.")
    try:
        result = float(value)
    except ValueError:
        raise gr.Error(f"{name} must be a number, got {_shown(value)}.") from None
    if not math.isfinite(result):
        raise gr.Error(f"{name} must be a finite number, got {_shown(value)}.")
    if low is not None and result < low:
        raise gr.Error(f"{name} must be at least {written(low)}, got {written(result)}.")
    if high is not None and result > high:
        raise gr.Error(f"{name} must be at most {written(high)}, got {written(result)}. {cap}".rstrip())
    return result


def integer(value, name: str, low: int | None = None, high: int | None = None, *, cap: str = "") -> int:
    """A whole number in [low, high] (4.0 is fine, 4.5 is not)."""
    result = number(value, name, low, high, cap=cap)
    if not result.is_integer():
        raise gr.Error(f"{name} must be a whole number, got {written(result)}.")
    return int(result)


def optional_integer(value, name: str, low: int, high: int, *, cap: str = "") -> int | None:
    """None, an empty field or 0 mean 'off' (e.g. top-k); anything else is an integer in range."""
    if value is None or value == "" or value == 0:
        return None
    return integer(value, name, low, high, cap=cap)


def flag(value, name: str, default: bool = False) -> bool:
    """A checkbox's value: True or False (None, as an API caller may leave it, is `default`)."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise gr.Error(f"{name} must be true or false, got {_shown(value)}.")
    return value


def text(value, name: str, max_chars: int, *, allow_empty: bool = False, cap: str = "") -> str:
    """A string of at most `max_chars` characters; empty (or only whitespace) unless allowed."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise gr.Error(f"{name} must be text, got {_shown(value)}.")
    if not allow_empty and not value.strip():
        raise gr.Error(f"{name} is empty.")
    if len(value) > max_chars:
        raise gr.Error(f"{name} has {len(value):,} characters; the limit is {max_chars:,}. {cap}".rstrip())
    return value


def choice(value, name: str, options: Iterable[str]) -> str:
    """One of `options` exactly."""
    options = list(options)
    if value not in options:
        raise gr.Error(f"{name} must be one of {', '.join(map(str, options))}; got {_shown(value)}.")
    return value


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn core's user-facing errors (ValueError and its subclasses DataError, CheckpointError)
    into gr.Error so the browser shows the message; anything else stays a hidden server error."""
    try:
        yield
    except gr.Error:
        raise
    except ValueError as error:
        raise gr.Error(str(error)) from error


def tokens(tokenizer, text: str, name: str) -> list[int]:
    """`text` in the tokenizer's ids; a character it cannot encode is refused naming the field."""
    try:
        return tokenizer.encode(text)
    except ValueError as error:
        raise gr.Error(f"{name}: {error}") from None


def written(value: float) -> str:
    """A number as a person writes it: 2147483648 and 0.001, never 2.14748e+09 (`:g` keeps only 6 digits
    and would name a seed's bound and a seed just past it alike); 1e+300 where digits would run on."""
    exact = float(value).is_integer() and abs(value) < 2**53  # every integer below 2**53 is a float exactly
    return str(int(value)) if exact else repr(float(value))


def _shown(value, limit: int = 40) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit] + "..."


def as_markdown(text: str) -> str:
    """Untrusted text (a link's part, a room's name) shown as itself in Markdown: no markup, no HTML, no line
    breaks."""
    text = re.sub(r"[\x00-\x1f\x7f]", " ", text)
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)  # a backslash before each ASCII punctuation mark
