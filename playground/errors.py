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

What this needs of Gradio's insides (its events, its input checks, its routes) is reached through
`playground.gradio_internals`. Never imports core, the sessions or a tab: it wraps whatever handlers
it is given.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable

import gradio as gr
from fastapi import Request
from fastapi.responses import JSONResponse

from playground.gradio_internals import UNKNOWN_EVENT_ERRORS, InputCheckedBlocks, event_handlers, missing_event

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


class GuardedBlocks(InputCheckedBlocks):
    """gr.Blocks whose own request checks (too few inputs, a file outside its cache, malformed file
    data) answer with a short message and one log line, not an empty error and a traceback that
    echoes the whole request."""

    def on_input_error(self, error: Exception, where: str) -> gr.Error:
        if isinstance(error, gr.Error):
            return _answer(error, where)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _answer(gr.Error(f"The request's inputs are not valid: {shorten(first_line, 200)}"), where)


def harden(demo: gr.Blocks) -> None:
    """Guard every handler of `demo` and give the app's own the raw inputs (see the module docstring)."""
    for handler in event_handlers(demo):  # (an event that runs in the browser alone, a Stop that cancels, has none)
        # Gradio's own handlers (an Examples table's loader) expect their inputs preprocessed
        ours = not getattr(handler.fn, "__module__", "").startswith("gradio")
        handler.fn = guard(handler.fn, handler.where)
        if ours:
            handler.take_raw_inputs()


def unknown_event_handlers() -> dict[type[Exception], Callable]:
    """FastAPI's `exception_handlers` for the app Gradio builds (`launch(app_kwargs=...)`): a call to an
    event the app does not have gets 404 and its reason, and the log one line."""
    return {error: _no_such_event for error in UNKNOWN_EVENT_ERRORS}


async def _no_such_event(request: Request, error: Exception) -> JSONResponse:
    missing = missing_event(request, error)
    if missing is None:
        raise error  # a KeyError of the server's own: a bug, whose traceback the log must keep
    reason = f"This app has no event {missing}."
    log.info("refused %s: %s", one_line(request.url.path), one_line(reason))
    return JSONResponse({"detail": reason}, status_code=404)
