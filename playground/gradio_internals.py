"""Every use the app makes of Gradio beyond its public `gr.` API, in this one module, read against Gradio 6.31.0.

Each is named here with why the app needs it. `tests/test_gradio_internals.py` checks that each is still there in
the shape used here, so an upgrade that moves one fails that test, naming it, rather than a learner's click; and
that no other module of the app imports from Gradio's submodules or reaches for these attributes:

- `PlotData` (gradio.components.plot, fields `type` and `plot`): a gr.Plot's value already serialised. A run's
  stream sends the same chart many times; `plotly_json` hands Gradio Plotly's JSON made once, not a figure it
  would serialise again on every update.
- Gradio's Plotly bundle (`PLOTLY_BUNDLE`: `templates/frontend/assets/PlotlyPlot-*.js`, which sets `window.Plotly`
  when imported, as gr.Plot imports it): `playground.live_plot` draws with the same Plotly, imported from the same
  address, so a page holds one Plotly.
- `Dependency` (gradio.events): what an event listener returns (`button.click(...)`), for annotations only.
- `Blocks.preprocess_data(block_fn, inputs, state, explicit_call)`, awaited for every call's inputs:
  `InputCheckedBlocks` overrides it to turn Gradio's own input checks' failures into the app's message
  (`on_input_error`), and to drop the copy of each input Gradio keeps in the session's state
  (`SessionState.config_values[block._id]["props"]["value"]`, kept for deep links, which the app does not use).
- `Blocks.fns` ({index: BlockFunction}, with `fn`, `preprocess`, `api_name` and `name`): every event's handler,
  which `playground.errors.harden` wraps and gives raw inputs, and `playground.app` names (`EventHandler`).
- The FastAPI app Gradio builds: a call to an event name it does not have raises `FnIndexInferError`
  (gradio.route_utils) or KeyError, an unknown fn_index KeyError; `missing_event` reads which from the route's
  `api_name` path parameter and `request.app.get_blocks().fns`.
- `Blocks.state_holder` (a StateHolder, set at launch: `lock`, `session_data` and `time_last_used` by session
  hash): Gradio's own state of each session, forgotten with the app's session (`forget_sessions`,
  `idle_sessions`), since Gradio keeps it for an hour.
- An unload event's gr.Request wraps the page's heartbeat request (`request.request`, whose FastAPI route is
  `.../heartbeat/{session_hash}`): how `page_closed` tells a page that closed from a client calling the event.
- `children` of a layout block: what `descendants` walks (the Train tab checks its accordions hold its fields).
- Optional imports on hot paths: `MatplotlibBackendMananger` (gradio.utils, sic), entered around every call of
  an event (each update of a stream too), imports matplotlib, and `Plot.get_config` imports bokeh each time a
  session's state is made. Where one is not installed, each failed import searches `sys.path` again (about a
  millisecond; 14 s of a room of sixty learners training, in a profile): `skip_missing_optional_imports`
  records them as absent once, so the imports fail at once.

Never imports core, the sessions, the errors or a tab: they use Gradio through this module and `gr.` alone.
"""

from __future__ import annotations

import datetime
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr
from fastapi import Request
from gradio.block_function import BlockFunction
from gradio.blocks import Block
from gradio.components.plot import PlotData
from gradio.events import Dependency  # noqa: F401 (for the tabs' annotations)
from gradio.route_utils import FnIndexInferError

READ_AGAINST = "6.31.0"  # the Gradio whose source this module was read against
HEARTBEAT_ROUTE_END = "/heartbeat/{session_hash}"  # the route whose end runs a page's unload events
FRONTEND_ASSETS = Path(gr.__file__).parent / "templates" / "frontend" / "assets"  # served at the page's assets/
# What Gradio raises for a call to an event it does not have: an unknown name FnIndexInferError (/call, /run)
# or KeyError (/call/v2), an unknown fn_index KeyError (/queue/join, /run/predict).
UNKNOWN_EVENT_ERRORS: tuple[type[Exception], ...] = (FnIndexInferError, KeyError)


def _plotly_bundle() -> str:
    """The name of Gradio's Plotly bundle among its page's assets (one, whose name has a hash of its content)."""
    found = sorted(path.name for path in FRONTEND_ASSETS.glob("PlotlyPlot-*.js"))
    if len(found) != 1:
        raise RuntimeError(f"Gradio's page should have one Plotly bundle (PlotlyPlot-*.js), found {found}")
    return found[0]


PLOTLY_BUNDLE = _plotly_bundle()


def plotly_json(figure_json: str) -> PlotData:
    """A gr.Plot's value from Plotly's JSON (`figure.to_json()`, or written by hand), sent as it is."""
    return PlotData(type="plotly", plot=figure_json)


class EventHandler:
    """One event of a Blocks that runs on the server: its function (which the app may replace), its API name,
    where it is (for messages and the log), and whether Gradio preprocesses its inputs."""

    def __init__(self, block_fn: BlockFunction) -> None:
        self._block_fn = block_fn

    @property
    def fn(self) -> Callable:
        return self._block_fn.fn

    @fn.setter
    def fn(self, fn: Callable) -> None:
        self._block_fn.fn = fn

    @property
    def api_name(self) -> str | None:
        return self._block_fn.api_name or None

    @property
    def where(self) -> str:
        """'/train', or the event's name when it has no API name."""
        return f"/{self.api_name}" if self.api_name else (self._block_fn.name or "an event")

    def take_raw_inputs(self) -> None:
        """The handler gets each input's JSON value as the request carries it, unpreprocessed."""
        self._block_fn.preprocess = False


def event_handlers(demo: gr.Blocks) -> list[EventHandler]:
    """Every event of `demo` that runs a function on the server (one that runs in the browser alone has none)."""
    return [EventHandler(block_fn) for block_fn in demo.fns.values() if block_fn.fn is not None]


class InputCheckedBlocks(gr.Blocks):
    """gr.Blocks that hands every failure of Gradio's own input checks (too few inputs, a file outside its
    cache, malformed file data) to `on_input_error`, and keeps no copy of a call's inputs in Gradio's state
    of the session (a 2 MB pasted text would stay as long as that state)."""

    def on_input_error(self, error: Exception, where: str) -> Exception:
        """What to raise instead of `error`, which Gradio's checks of the inputs of the event at `where` raised."""
        return error

    async def preprocess_data(self, block_fn: BlockFunction, inputs: list[Any], state, explicit_call: bool = False):
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except Exception as error:
            raise self.on_input_error(error, EventHandler(block_fn).where) from None
        finally:
            _forget_inputs(state, block_fn)


def _forget_inputs(state, block_fn: BlockFunction) -> None:
    """Drop the copy of each input that Gradio keeps in the session's state (for deep links)."""
    values = getattr(state, "config_values", {})
    for block in block_fn.inputs:
        props = values.get(block._id, {}).get("props")
        if props is not None:
            props["value"] = None


def missing_event(request: Request, error: Exception) -> str | None:
    """How the request named an event the app does not have ("named /reset", "number 9999"), or None
    when `error` (one of UNKNOWN_EVENT_ERRORS) is about something else."""
    named = request.path_params.get("api_name")
    if isinstance(error, FnIndexInferError):
        return f"named /{named}"
    key = error.args[0] if len(error.args) == 1 else None
    if isinstance(key, int) and key not in request.app.get_blocks().fns:
        return f"number {key}"
    if named is not None and key == f"/{named}":  # /call/v2 looks the name up among the public events
        return f"named {key}"
    return None


def idle_sessions(demo: gr.Blocks, cutoff: datetime.datetime) -> list[str]:
    """The session hashes whose Gradio state was last used before `cutoff` (none before the app is launched)."""
    holder = getattr(demo, "state_holder", None)  # exists once the app is launched
    if holder is None:
        return []
    with holder.lock:
        return [key for key, used in holder.time_last_used.items() if used < cutoff]


def forget_sessions(demo: gr.Blocks, keys: Iterable[str]) -> None:
    """Drop Gradio's own state of these sessions (it keeps it for an hour otherwise)."""
    holder = getattr(demo, "state_holder", None)
    if holder is None:
        return
    with holder.lock:
        for key in keys:
            holder.session_data.pop(key, None)
            holder.time_last_used.pop(key, None)


def page_closed(request: gr.Request) -> bool:
    """Whether Gradio runs this unload event because the page closed: it then passes on the request of the
    page's heartbeat stream (its route .../heartbeat/{session_hash}) that just ended."""
    route = getattr(request.request, "scope", {}).get("route")  # FastAPI's route that took the request
    return route is not None and route.path.endswith(HEARTBEAT_ROUTE_END)


def descendants(block: Block) -> Iterator[Block]:
    """Every block laid out inside `block`, at any depth."""
    for child in getattr(block, "children", ()):
        yield child
        yield from descendants(child)


OPTIONAL_IMPORTS = ("matplotlib", "bokeh")  # what Gradio tries to import on every call or session (see above)


def skip_missing_optional_imports() -> None:
    """Record each of OPTIONAL_IMPORTS that is not installed as absent (`None` in `sys.modules`), so Gradio's
    imports of it fail at once instead of searching `sys.path` each time (see the module docstring)."""
    for name in OPTIONAL_IMPORTS:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = None  # type: ignore[assignment]  # Python's own marker for "not importable"
