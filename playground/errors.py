"""How errors reach the user and the log, for every event of the app at once.

    with GuardedBlocks() as demo:   # a gr.Blocks whose own input checks answer with a message
        ...                          # wire events as usual
    harden(demo)                     # every handler: raw inputs, a message for every error

- The app's handlers get the raw JSON values a request carries (`preprocess=False`): the app's own checks
  (`playground.validate`) then name the field and what is allowed, where Gradio's component
  preprocessing would fail with an empty error on `"abc"`, `null` or NaN, turn `true` into 1, or
  echo a 10 MB value back. Files are still moved into Gradio's cache and path-checked before.
- A user error (gr.Error) is logged as one short line, without a traceback.
- Anything else is a server bug: its traceback is logged, and the user gets a message saying so
  (never an empty error); the session's model is untouched, since handlers only replace it once
  a new one is complete.
- A call to an event the app does not have (`/gradio_api/call/reset`, an unknown `fn_index`) is
  answered 404 with the reason, and logged as one line (`unknown_event_handlers`, given to the
  FastAPI app Gradio builds): Gradio would answer 500 and log a 70-line traceback each time.

Never imports core, the sessions or a tab: it wraps whatever handlers it is given.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import gradio as gr
from fastapi import Request
from fastapi.responses import JSONResponse
from gradio.route_utils import FnIndexInferError

log = logging.getLogger("playground")
MESSAGE_CHARS = 600  # what a user is shown of any message at most
LOG_CHARS = 200  # what the log keeps of one


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def one_line(text: str) -> str:
    """`text` as one short line of the log."""
    return shorten(text, LOG_CHARS).replace("\n", " ")


def _answer(error: Exception, where: str) -> gr.Error:
    """The gr.Error a user sees for `error`, logged once: one line for theirs, a traceback for ours."""
    if isinstance(error, gr.Error):
        log.info("user error in %s: %s", where, one_line(error.message))
        error.message = shorten(error.message, MESSAGE_CHARS)
        error.print_exception = False
        return error
    log.error("server error in %s", where, exc_info=error)
    return gr.Error(
        f"The server hit an unexpected problem ({type(error).__name__}) and has logged it. Your model is "
        "kept; try again, or change the input.", print_exception=False,
    )


def guard(fn: Callable, where: str) -> Callable:
    """`fn` (a function or a generator function) whose every exception becomes a logged gr.Error."""
    if inspect.isgeneratorfunction(fn):
        def guarded(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as error:  # GeneratorExit (a cancelled stream) is not an Exception
                raise _answer(error, where) from None
    else:
        def guarded(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as error:
                raise _answer(error, where) from None
    functools.update_wrapper(guarded, fn)
    # Gradio reads the parameters (gr.Request, event data) from the signature: fn's, as its callers see
    # it (a bound method's without `self`, even where its function carries a __signature__ of its own).
    guarded.__signature__ = inspect.signature(fn)
    return guarded


class GuardedBlocks(gr.Blocks):
    """gr.Blocks whose own request checks (too few inputs, a file outside its cache, malformed file
    data) answer with a short message and one log line, not an empty error and a traceback that
    echoes the whole request."""

    async def preprocess_data(self, block_fn, inputs: list[Any], state, explicit_call: bool = False):
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except gr.Error as error:
            raise _answer(error, _where(block_fn)) from None
        except Exception as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise _answer(gr.Error(f"The request's inputs are not valid: {shorten(first_line, 200)}"),
                          _where(block_fn)) from None
        finally:
            _forget_inputs(state, block_fn)


def _forget_inputs(state, block_fn) -> None:
    """Drop the copy of each input that Gradio keeps in the session's state (for deep links, which
    this app does not use): otherwise every session hash keeps, say, a 2 MB pasted text for as long
    as Gradio keeps its state."""
    values = getattr(state, "config_values", {})
    for block in block_fn.inputs:
        props = values.get(block._id, {}).get("props")
        if props is not None:
            props["value"] = None


def harden(demo: gr.Blocks) -> None:
    """Guard every handler of `demo` and give the app's own the raw inputs (see the module docstring)."""
    for block_fn in demo.fns.values():
        if block_fn.fn is None:  # a front-end-only event (e.g. a Stop that cancels)
            continue
        # Gradio's own handlers (an Examples table's loader) expect their inputs preprocessed
        ours = not getattr(block_fn.fn, "__module__", "").startswith("gradio")
        block_fn.fn = guard(block_fn.fn, _where(block_fn))
        block_fn.preprocess = block_fn.preprocess and not ours


def _where(block_fn) -> str:
    return f"/{block_fn.api_name}" if block_fn.api_name else (block_fn.name or "an event")


def unknown_event_handlers() -> dict[type[Exception], Callable]:
    """FastAPI's `exception_handlers` for the app Gradio builds (`launch(app_kwargs=...)`): a call to an
    event the app does not have gets 404 and its reason, and the log one line."""
    # Gradio looks the event up without a check: an unknown name raises FnIndexInferError (/call, /run)
    # or KeyError (/call/v2), an unknown fn_index KeyError (/queue/join, /run/predict).
    return {FnIndexInferError: _no_such_event, KeyError: _no_such_event}


async def _no_such_event(request: Request, error: Exception) -> JSONResponse:
    missing = _missing_event(request, error)
    if missing is None:
        raise error  # a KeyError of the server's own: a bug, whose traceback the log must keep
    reason = f"This app has no event {missing}."
    log.info("refused %s: %s", one_line(request.url.path), one_line(reason))
    return JSONResponse({"detail": reason}, status_code=404)


def _missing_event(request: Request, error: Exception) -> str | None:
    """How the request named an event the app does not have ("named /reset", "number 9999"), or None
    when `error` is about something else."""
    named = request.path_params.get("api_name")
    if isinstance(error, FnIndexInferError):
        return f"named /{named}"
    key = error.args[0] if len(error.args) == 1 else None
    if isinstance(key, int) and key not in request.app.get_blocks().fns:
        return f"number {key}"
    if named is not None and key == f"/{named}":  # /call/v2 looks the name up among the public events
        return f"named {key}"
    return None
