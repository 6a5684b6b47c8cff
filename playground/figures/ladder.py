"""Figures of the seeds' ladder: every rung's validation curve, overlaid, beside the lecture's figures.

Never imports a tab, the sessions or core's training: figures draw the numbers they are given
(as Plotly JSON ready for gr.Plot).
"""

from __future__ import annotations

import functools
import json

import plotly.graph_objects as go

from playground.figures import PALETTE, wrapped
from playground.figures.training import _finite  # JSON has no NaN: a missing estimate is a gap
from playground.gradio_internals import PlotData, plotly_json

# One colour per rung, in rung order (the ladder has seven, the palette eight; they go round past that).
RUNG_COLORS = PALETTE
EMPTY_NOTE = "Press Climb the ladder: each rung's validation curve appears here."


def ladder_figure(curves: list[tuple[str, list[tuple[int, float]], float | None]], steps: int) -> PlotData:
    """Validation loss against step, one line per rung, and the lecture's figure for a rung (when it
    has one) as a dotted line of the same colour across the whole run.

    `curves` are (legend label, (step, loss) points, the lecture's figure or None), in rung order;
    `steps` is each rung's length, the x range. Streamed several times a second, so the traces
    are plain data and the layout (checked by Plotly) is built once per x range.
    """
    traces = []
    for index, (label, points, lecture) in enumerate(curves):
        color = RUNG_COLORS[index % len(RUNG_COLORS)]
        traces.append(dict(
            type="scatter", x=[step for step, _ in points], y=_finite(loss for _, loss in points), name=label,
            legendgroup=label, mode="lines+markers", line=dict(color=color, width=2), marker=dict(size=5),
            hovertemplate=f"{label}<br>step %{{x}}<br>validation loss %{{y:.3f}}<extra></extra>",
        ))
        if lecture is not None:  # hidden and shown with its rung's legend entry
            traces.append(dict(
                type="scatter", x=[0, steps], y=[lecture, lecture], name=f"the lecture: {label}", legendgroup=label,
                showlegend=False, mode="lines", line=dict(color=color, width=1.5, dash="dot"),
                hovertemplate=f"the lecture's figure for {label}: {lecture:.2f}<extra></extra>",
            ))
    layout = _layout_json(steps, empty=not curves)
    return plotly_json(f'{{"data":{json.dumps(traces)},"layout":{layout}}}')


@functools.lru_cache(maxsize=16)
def _layout_json(steps: int, empty: bool) -> str:
    """The chart's layout as JSON, per x range: theme, axes, the legend under the chart (the rungs'
    titles are long: beside it they would squeeze a phone's chart to nothing)."""
    fig = go.Figure()
    fig.update_layout(
        height=500, margin=dict(l=50, r=10, t=50, b=40), template="plotly_white",  # room for the block label
        legend=dict(orientation="h", x=0, y=0, xanchor="left", yanchor="bottom", yref="container",
                    title=dict(text="dotted: the lecture's figure for the rung", side="top")),
        xaxis=dict(title="step", range=[0, steps]), yaxis_title="validation loss (nats)",
        uirevision="ladder",  # keep the user's zoom while the chart updates
    )
    if empty:
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.add_annotation(text=wrapped(EMPTY_NOTE), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                           font=dict(size=14, color="#6b7280"))
    return json.dumps(fig.to_plotly_json()["layout"])
