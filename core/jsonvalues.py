"""Values read from untrusted JSON (a checkpoint's description, its training state), checked without
surprises, and shown in messages that reach users without flooding them.

    is_count(row.get("step"))        # an int >= 0, and not a bool (JSON's true is Python's 1)
    as_float(value)                  # a JSON number as a float; None for a string, a bool or a huge int
    shown(value)                     # repr, cut to 60 characters

Imports nothing of the project. Never imports torch, gradio, plotly or `playground`: plain Python values only.
"""

from __future__ import annotations


def is_count(value: object) -> bool:
    """A JSON integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def as_float(value: object) -> float | None:
    """A JSON number (an int or a float, not a bool) as a float; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return None


def shown(value: object) -> str:
    """A value for an error message: its repr, cut short (messages reach end users)."""
    return clipped(repr(value), 60)


def clipped(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, with "..." where it was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
