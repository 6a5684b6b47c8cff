"""Gradio's internals that the app relies on (playground/gradio_internals.py), each still there in the shape the
adapter uses: a Gradio upgrade that moves one fails here, naming it. And no other module of the app reaches them:
it imports from `gradio` itself only (as `gr`), never a submodule, and touches none of their attributes."""

import ast
import asyncio
import concurrent.futures
import datetime
import importlib.util
import inspect
import sys
import types
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go
import pytest
from fastapi import Request
from gradio.data_classes import PredictBody
from gradio.route_utils import get_fn
from gradio.routes import App
from gradio.state_holder import SessionState, StateHolder

from playground import gradio_internals as internals

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = ROOT / "playground" / "gradio_internals.py"
PUBLIC_SUBMODULES = {"themes"}  # documented as `gr.themes.Soft` and the like
# The attributes of Gradio's objects that only the adapter may touch (see its docstring).
INTERNAL_ATTRIBUTES = {"fns", "preprocess_data", "config_values", "_id", "get_blocks", "state_holder", "children",
                       "time_last_used", "session_data"}


def run_coroutine(coroutine):
    """Its result, run on a thread of its own: a browser test's Playwright may hold this thread's event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def changed(what: str) -> str:
    return (f"Gradio {gr.__version__} changed {what}, which playground/gradio_internals.py relies on (read against "
            f"Gradio {internals.READ_AGAINST}): adapt the adapter, then this test")


class Recording(internals.InputCheckedBlocks):
    """The adapter's Blocks, saying where an input check failed and why."""

    def on_input_error(self, error: Exception, where: str) -> Exception:
        return LookupError(f"{where}: {error}")


@pytest.fixture(scope="module")
def demo():
    with Recording() as demo:
        box, out = gr.Textbox(), gr.Textbox()
        box.submit(lambda text: text.upper(), box, out, api_name="shout")
        gr.Button().click(None, js="() => {}")  # runs in the browser alone: no handler on the server
        with gr.Accordion("outer") as demo.accordion:
            with gr.Row():
                demo.inner = gr.Number()
    demo.box = box
    return demo


def test_plot_data_is_a_plots_value_as_gradio_makes_it():
    figure = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    value = internals.plotly_json(figure.to_json())
    assert {"type", "plot"} <= set(internals.PlotData.model_fields), changed("PlotData's fields")
    assert gr.Plot().postprocess(value) is value, changed("gr.Plot's postprocess of a PlotData (no longer as it is)")
    assert gr.Plot().postprocess(figure) == value, changed("how gr.Plot serialises a Plotly figure")


def test_the_plotly_bundle_is_the_one_gr_plot_imports_and_it_sets_window_plotly():
    assets = internals.FRONTEND_ASSETS
    importers = [path.name for path in assets.glob("Plot-*.js") if internals.PLOTLY_BUNDLE in path.read_text()]
    assert importers, changed(f"which asset imports the Plotly bundle ({internals.PLOTLY_BUNDLE})")
    bundle = (assets / internals.PLOTLY_BUNDLE).read_text(encoding="utf-8")
    assert "window.Plotly=" in bundle.replace(" ", ""), changed("the Plotly bundle's setting window.Plotly")
    index = (assets.parent / "index.html").read_text(encoding="utf-8")
    assert '<script type="module"' in index and "./assets/index-" in index, changed("how the page loads its assets")


def test_an_event_listener_returns_a_dependency():
    with gr.Blocks():
        listener = gr.Button().click(lambda: None)
    assert isinstance(listener, internals.Dependency) and callable(listener.then), changed("events.Dependency")


def test_preprocess_data_takes_each_calls_inputs():
    method = gr.Blocks.preprocess_data
    assert inspect.iscoroutinefunction(method), changed("Blocks.preprocess_data (no longer async)")
    assert list(inspect.signature(method).parameters) == ["self", "block_fn", "inputs", "state", "explicit_call"], \
        changed("Blocks.preprocess_data's parameters")


def test_a_failed_input_check_goes_to_on_input_error_and_no_input_stays_in_the_state(demo):
    state = SessionState(demo)
    (handler,) = internals.event_handlers(demo)
    props = state.config_values[demo.box._id]["props"]
    props["value"] = "a pasted text"
    assert run_coroutine(demo.preprocess_data(handler._block_fn, ["hi"], state)) == ["hi"]
    assert props["value"] is None, changed("SessionState.config_values[block._id]['props']['value']")
    with pytest.raises(LookupError, match="^/shout: .*enough input values"):  # one input wanted, none given
        run_coroutine(demo.preprocess_data(handler._block_fn, [], state))


def test_blocks_fns_hold_each_events_handler(demo):
    handlers = internals.event_handlers(demo)
    assert [handler.where for handler in handlers] == ["/shout"], changed("Blocks.fns (its events and their fn)")
    (handler,) = handlers
    assert handler.api_name == "shout" and handler.fn("a") == "A", changed("BlockFunction's api_name and fn")
    block_fn = handler._block_fn
    assert block_fn.preprocess is True and block_fn.name, changed("BlockFunction's preprocess and name")
    handler.take_raw_inputs()
    assert block_fn.preprocess is False and demo.fns[block_fn._id] is block_fn, changed("Blocks.fns' keys")


def test_an_unknown_event_raises_what_the_404_handlers_catch(demo):
    named = PredictBody(data=[], fn_index=None, session_hash=None)
    with pytest.raises(internals.UNKNOWN_EVENT_ERRORS[0]):
        get_fn(demo, "reset", named)
    with pytest.raises(KeyError):
        get_fn(demo, None, PredictBody(data=[], fn_index=9999, session_hash=None))
    paths = {route.path for route in _routes(App.create_app(demo).router)}
    assert {"/gradio_api/call/{api_name}", "/gradio_api/call/v2/{api_name}"} <= paths, \
        changed("the routes that take an event's api_name")


def test_missing_event_names_what_the_request_asked_for(demo):
    app = App.create_app(demo)
    assert app.get_blocks() is demo, changed("App.get_blocks")

    def request(api_name: str | None = None) -> Request:
        return Request({"type": "http", "app": app, "path_params": {} if api_name is None else {"api_name": api_name}})

    assert internals.missing_event(request("reset"), internals.UNKNOWN_EVENT_ERRORS[0]("no")) == "named /reset"
    assert internals.missing_event(request(), KeyError(9999)) == "number 9999"
    assert internals.missing_event(request("reset"), KeyError("/reset")) == "named /reset"
    assert internals.missing_event(request(), KeyError(next(iter(demo.fns)))) is None  # there is one: a bug of ours


def test_the_state_holder_keeps_each_sessions_state_and_last_use(demo):
    StateHolder().set_blocks(demo)  # what launching does
    holder = demo.state_holder
    assert hasattr(holder.lock, "acquire"), changed("StateHolder.lock")
    for key in ("old", "new"):
        holder[key]  # reading a session hash makes its state, as a call does
    assert set(holder.session_data) >= {"old", "new"}, changed("StateHolder.session_data")
    holder.time_last_used["old"] = datetime.datetime.now() - datetime.timedelta(hours=2)
    assert internals.idle_sessions(demo, datetime.datetime.now() - datetime.timedelta(hours=1)) == ["old"], \
        changed("StateHolder.time_last_used")
    internals.forget_sessions(demo, ["old"])
    assert "old" not in holder.session_data and "old" not in holder.time_last_used and "new" in holder.session_data


def test_a_page_closes_through_its_heartbeat_route(demo):
    routes = {route.name: route.path for route in _routes(App.create_app(demo).router) if hasattr(route, "name")}
    assert routes.get("heartbeat", "").endswith(internals.HEARTBEAT_ROUTE_END), changed("the heartbeat's route")
    heartbeat = Request({"type": "http", "route": types.SimpleNamespace(path=routes["heartbeat"])})
    assert gr.Request(request=heartbeat).request is heartbeat, changed("gr.Request.request")
    assert internals.page_closed(gr.Request(request=heartbeat))
    called = Request({"type": "http", "route": types.SimpleNamespace(path="/gradio_api/call/{api_name}")})
    assert not internals.page_closed(gr.Request(request=called))


def test_descendants_are_every_block_inside(demo):
    assert demo.inner in set(internals.descendants(demo.accordion)), changed("a layout block's children")
    assert demo.box not in set(internals.descendants(demo.accordion))


def test_every_call_imports_matplotlib_which_the_app_records_as_absent_once(monkeypatch):
    assert "matplotlib" in internals.OPTIONAL_IMPORTS
    from gradio.utils import MatplotlibBackendMananger

    assert "import matplotlib" in inspect.getsource(MatplotlibBackendMananger.__enter__), changed(
        "the matplotlib import around every call")
    assert "import bokeh" in inspect.getsource(gr.Plot.get_config), changed("the bokeh import of a plot's config")
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    searches: list[str] = []
    monkeypatch.setattr(sys, "meta_path", [Spy(searches), *sys.meta_path])
    if importlib.util.find_spec("matplotlib") is not None:  # installed: imported once, the app changes nothing
        internals.skip_missing_optional_imports()
        assert "matplotlib" not in sys.modules
        return
    searches.clear()
    with MatplotlibBackendMananger():
        pass
    assert searches.count("matplotlib") == 2  # without the app's record: sys.path searched on every call
    internals.skip_missing_optional_imports()
    searches.clear()
    for _ in range(3):
        with MatplotlibBackendMananger():
            pass
    assert searches == [] and sys.modules["matplotlib"] is None


class Spy:
    """A meta path finder that records the modules Python searches for and finds none of them."""

    def __init__(self, searches: list) -> None:
        self.searches = searches

    def find_spec(self, name, path=None, target=None):
        self.searches.append(name)
        return None


def _routes(router):
    """Every route of a FastAPI router, inside the routers it includes too."""
    for route in router.routes:
        inner = getattr(route, "original_router", None)
        yield from _routes(inner) if inner is not None else [route]


def reaches_past_gr(source: str) -> list[str]:
    """What a module's source reaches of Gradio beyond `gradio` itself: an import from a submodule, an
    attribute path through a submodule (`gr.blocks.Block`), or one of the internal attributes."""
    tree, found = ast.parse(source), []
    aliases = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names if alias.name == "gradio"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {alias.name}" for alias in node.names if alias.name.startswith("gradio.")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gradio."):
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute):
            if node.attr in INTERNAL_ATTRIBUTES:
                found.append(f".{node.attr}")
            inner = node.value
            if (isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id in aliases
                    and isinstance(getattr(gr, inner.attr, None), types.ModuleType)
                    and inner.attr not in PUBLIC_SUBMODULES):
                found.append(f"{inner.value.id}.{inner.attr}.{node.attr}")
    return found


def test_the_scan_finds_each_way_past_gr():
    source = ("import gradio as gr\nfrom gradio.components.plot import PlotData\nimport gradio.routes\n"
              "x: gr.blocks.Block\ny = demo.fns\ntheme = gr.themes.Soft()\nbox = gr.Textbox()\n")
    assert sorted(reaches_past_gr(source)) == sorted(["from gradio.components.plot import ...", "import gradio.routes",
                                                      "gr.blocks.Block", ".fns"])


def test_only_the_adapter_reaches_past_gr():
    reached = {str(path.relative_to(ROOT)): found for path in sorted((ROOT / "playground").rglob("*.py"))
               if path != ADAPTER and (found := reaches_past_gr(path.read_text(encoding="utf-8")))}
    assert not reached, f"only playground/gradio_internals.py may use Gradio's internals: {reached}"
