"""A Plotly chart that a stream or a timer redraws in place: `LivePlot`, for every chart the app updates while it
runs (a training's loss, live attention map and head scores, the replay, the baby GPT's chain, the ladder, the
class chart).

Why not gr.Plot: its page side mounts a new chart for every new value (the component is keyed on the value), and
each mount draws the figure twice from nothing. Measured in Chromium on a page training the default preset, the
three live charts of the Train tab cost its main thread ~40 ms (loss), ~90 ms (attention) and ~100 ms (head scores)
an update, several updates a second: the page was busy all the time it trained, and ten such pages on a 2-core host
starved everything else on it (issue 39). A LivePlot is a gr.HTML whose value is gr.Plot's (the figure's Plotly
JSON, `{"type": "plotly", "plot": ...}`: handlers and the API see the same values), drawn by its own script with
Plotly.react into the same element, so an update costs what changed. Its script draws only the newest value, and
only while the chart is on screen (a chart on another tab, or in a hidden browser tab, draws when it shows).

It draws with the page's own Plotly (Gradio's bundle: `gradio_internals.PLOTLY_BUNDLE`), imported from the same
address Gradio imports it from, so the page holds one Plotly whichever chart loads it first. A script that has a
figure of its own to show (the class chart's) hands it to `element.querySelector(".live-plot").show(json)`.

Never imports core or a tab: a component, used by the tabs.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
import plotly.graph_objects as go

from playground.gradio_internals import PLOTLY_BUNDLE, PlotData

CANVAS = '<div class="live-plot"></div>'
# gr.HTML's label floats over its top-left corner, where gr.Plot's sits above the chart: the chart starts below it,
# or Plotly's toolbar (top right, on hover) covers the label on a phone's narrow chart.
BELOW_THE_LABEL = ".live-plot { margin-top: 20px; }"
# The page side. `show` draws a figure's JSON on the next animation frame (none in a hidden browser tab) if the
# chart is on screen, else when it shows (the observer sees its size change), and always the newest: a value that
# comes while a draw runs waits for it, and values in between are never drawn. The figure's layout gets what gr.Plot
# gives it (autosize, room for a title), so a chart looks as it did. The chart follows its element's width (a tab
# shown, a phone turned) through the observer below, not Plotly's `responsive` (which sizes the chart to 100% of an
# element whose height is the chart's own: at a new width the element collapsed to nothing under it), and not
# while the width is below MIN_WIDTH: in a layout's passing state, a plot left no room inside its margins makes
# Plotly throw.
DRAW = """
const canvas = element.querySelector(".live-plot");
const gradio = [...document.querySelectorAll("script[type=module][src]")].find(s => /\\/assets\\/index-/.test(s.src));
const bundle = new URL("BUNDLE", gradio ? gradio.src : new URL("assets/", document.baseURI));
let plotly = null, newest = null, drawn = null, drawing = false, planned = false;
const loaded = () => plotly || (plotly = window.Plotly ? Promise.resolve(window.Plotly)
                                                        : import(bundle.href).then(() => window.Plotly));
const draw = async () => {
    planned = false;
    if (drawing || newest === drawn || canvas.offsetParent === null) return;
    drawing = true;
    try {
        const shown = newest, Plotly = await loaded(), figure = JSON.parse(shown);
        const layout = figure.layout || {}, config = figure.config || {};
        layout.autosize = true;
        layout.margin = layout.margin || {};
        if (layout.title) layout.margin.t = Math.max(100, layout.margin.t || 0);
        layout.margin.autoexpand = true;
        await Plotly.react(canvas, figure.data || [], layout, config);
        drawn = shown;
    } catch (error) {
        console.error("A chart could not be drawn:", error);
        drawn = newest;
    } finally {
        drawing = false;
    }
    if (newest !== drawn) plan();
};
const plan = () => { if (!planned) { planned = true; requestAnimationFrame(draw); } };
canvas.show = (json) => { newest = json; plan(); };
const fromValue = () => { if (props.value && props.value.plot) canvas.show(props.value.plot); };
let width = 0;
new ResizeObserver(() => {
    const now = canvas.clientWidth >= MIN_WIDTH ? canvas.clientWidth : 0;  // 0: hidden, or too narrow to draw
    if (now === width) return;
    width = now;
    if (!now) return;
    if (newest !== drawn) plan();
    else if (drawn !== null && plotly) plotly.then(Plotly => Plotly.Plots.resize(canvas)).catch(() => {});
}).observe(canvas);
watch("value", fromValue);
fromValue();
""".replace("BUNDLE", PLOTLY_BUNDLE).replace("MIN_WIDTH", "100")


class LivePlot(gr.HTML):
    """A chart that takes gr.Plot's values (Plotly JSON: `plotly_json`, or the figure builders' PlotData) and is
    redrawn in place by each new one."""

    def __init__(self, value: PlotData | go.Figure | None = None, *, label: str, elem_id: str, **kwargs: Any) -> None:
        super().__init__(value=value, label=label, show_label=True, elem_id=elem_id, html_template=CANVAS,
                         css_template=BELOW_THE_LABEL, js_on_load=DRAW, container=True, padding=False,
                         apply_default_css=False, **kwargs)

    def postprocess(self, value: PlotData | go.Figure | None) -> dict | None:  # type: ignore[override]
        """The figure as gr.Plot sends it: {"type": "plotly", "plot": its JSON}."""
        if value is None:
            return None
        return {"type": "plotly", "plot": value.to_json() if isinstance(value, go.Figure) else value.plot}

    def api_info(self) -> dict[str, Any]:
        return PlotData.model_json_schema()

    def example_payload(self) -> Any:
        return None

    def example_value(self) -> Any:
        return None
