"""LivePlot (playground/live_plot.py) takes and sends what gr.Plot does, so handlers and API clients see one kind of
chart value; that it redraws in place is seen in Chromium (test_browser.py's training)."""

import json

import gradio as gr
import plotly.graph_objects as go

from playground.gradio_internals import plotly_json
from playground.live_plot import LivePlot


def test_a_live_plot_sends_a_figure_as_gr_plot_does():
    figure = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    with gr.Blocks():
        live, plot = LivePlot(label="Loss", elem_id="a-live-plot"), gr.Plot()
    for value in (figure, plotly_json(figure.to_json())):
        sent = live.postprocess(value)
        assert sent == plot.postprocess(value).model_dump()
        assert json.loads(sent["plot"])["data"][0]["y"] == [3, 4]
    assert live.postprocess(None) is None
    assert set(live.api_info()["properties"]) == {"type", "plot"}


def test_a_live_plot_starts_with_its_first_figure_and_draws_in_its_own_element():
    with gr.Blocks():
        live = LivePlot(go.Figure(go.Bar(x=["a"], y=[1])), label="Chart", elem_id="a-live-plot")
    config = live.get_config()
    assert json.loads(config["value"]["plot"])["data"][0]["type"] == "bar"
    assert config["label"] == "Chart" and config["show_label"]
    assert 'class="live-plot"' in config["html_template"] and "Plotly.react" in config["js_on_load"]
