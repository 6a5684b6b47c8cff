"""Values read from untrusted JSON (a checkpoint's description, its training state), checked without
surprises, and shown in messages that reach users without flooding them.

    is_count(row.get("step"))        # an int >= 0, and not a bool (JSON's true is Python's 1)
    as_float(value)                  # a JSON number as a float; None for a string, a bool or a huge int
    shown(value)                     # repr, cut to 60 characters
    param_groups_problem(groups)     # what is wrong with an optimizer's saved settings ('' if nothing)

Imports nothing of the project. Never imports torch, gradio, plotly or `playground`: plain Python values only.
"""

from __future__ import annotations

import math


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


def param_groups_problem(groups: object) -> str:
    """What is wrong with an optimizer's saved param_groups ('' if nothing). torch's load_state_dict
    takes every setting in them (betas, eps, weight decay...) as it is, so a string or a NaN there
    would only fail at the first step, or train on silently."""
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return "param_groups must be a list of objects"
    for index, group in enumerate(groups, 1):
        params = group.get("params")
        if not isinstance(params, list) or not all(is_count(i) for i in params):
            return f"param group {index} must list its parameters as non-negative integers"
        for key, value in group.items():
            values = value if isinstance(value, list) else [value]
            if key != "params" and not all(v is None or isinstance(v, bool) or
                                           (as_float(v) is not None and math.isfinite(as_float(v))) for v in values):
                return f"param group {index}: {clipped(str(key), 40)} must be a finite number, a flag or null, got {shown(value)}"
    return ""
