"""Figures of a training run: the live loss chart, the heads' pattern scores over training, and a
note in place of a figure, as Plotly JSON ready for gr.Plot (a stream sends them many times).

Draws only. Never imports core's training or a tab: the numbers come in as plain rows and tensors.
"""

from __future__ import annotations

import functools
import json
import math

import plotly.graph_objects as go
import torch

from playground.figures import BLUE, GREEN, ORANGE, PALETTE, VERMILLION, note_figure, wrapped
from playground.figures.attention import TOOLBAR_REMOVED
from playground.gradio_internals import PlotData, plotly_json

MAX_POINTS = 600  # per line: a long run stays a small payload at several updates a second
TRAIN_COLOR, VAL_COLOR, ANSWER_COLOR = BLUE, ORANGE, GREEN


def loss_figure(history: list[dict], max_iters: int | None = None) -> PlotData:
    """Training loss (every step, thinned to MAX_POINTS) and validation loss (its eval steps).

    `history` rows are dicts with 'step', 'train_loss' and optionally 'val_loss' (None between
    evaluations) and, for a task corpus, 'answer_loss' and 'answer_accuracy', as in
    `core.train.Trainer.history`; the answers' loss is a third line. `max_iters` fixes the x range so the curve
    grows from left to right instead of rescaling on every update.

    It is redrawn several times a second for every learner training, so it comes as Plotly JSON
    ready for gr.Plot: the traces are plain data, the layout (validated by Plotly, with its theme)
    is built once per x range and reused. Building a checked `go.Figure` each time cost ~20 ms.
    """
    train = _thin([row for row in history if row.get("train_loss") is not None], MAX_POINTS)
    val = [row for row in history if row.get("val_loss") is not None]
    traces = [
        dict(type="scatter", x=[r["step"] for r in train], y=_finite(r["train_loss"] for r in train), name="train",
             mode="lines", line=dict(color=TRAIN_COLOR, width=1.5),
             hovertemplate="step %{x}<br>train loss %{y:.4f}<extra></extra>"),
        dict(type="scatter", x=[r["step"] for r in val], y=_finite(r["val_loss"] for r in val), name="validation",
             mode="lines+markers", line=dict(color=VAL_COLOR, width=2), marker=dict(size=6),
             hovertemplate="step %{x}<br>validation loss %{y:.4f}<extra></extra>"),
    ]
    answers = [row for row in history if row.get("answer_loss") is not None]
    if answers:  # a task corpus: the loss on what can be learned, beside the floor of the whole line
        traces.append(dict(
            type="scatter", x=[r["step"] for r in answers], y=_finite(r["answer_loss"] for r in answers),
            name="answers (val)", mode="lines+markers", line=dict(color=ANSWER_COLOR, width=2, dash="dot"),
            marker=dict(size=5), customdata=_finite(r["answer_accuracy"] for r in answers),
            hovertemplate="step %{x}<br>loss on the answers %{y:.4f}<br>%{customdata:.0%} right<extra></extra>",
        ))
    x_max = max(max_iters, history[-1]["step"] if history else 0) if max_iters else None
    layout = _layout_json(x_max, empty=not history)
    return plotly_json(f'{{"data":{json.dumps(traces)},"layout":{layout}}}')


@functools.lru_cache(maxsize=64)
def _layout_json(x_max: int | None, empty: bool) -> str:
    """The chart's layout as JSON, per x range (a run has a handful): theme, axes, legend."""
    fig = go.Figure()
    fig.update_layout(
        # The top is the block label's (left) and the toolbar's (right, short): the legend goes under the
        # axis, where a phone's two rows of it cover nothing.
        height=320, margin=dict(l=50, r=10, t=40, b=90), template="plotly_white",
        legend=dict(orientation="h", x=0, y=0, xanchor="left", yanchor="bottom", yref="container"),
        modebar=dict(remove=TOOLBAR_REMOVED),
        xaxis_title="step", yaxis_title="loss (nats)",
        uirevision="loss",  # keep the user's zoom while the chart updates
    )
    if x_max:
        fig.update_xaxes(range=[0, x_max])
    if empty:
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.add_annotation(
            text=wrapped("Press Train: the loss appears here as the model learns."), showarrow=False,
            x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14, color="#6b7280"),
        )
    return json.dumps(fig.to_plotly_json()["layout"])


def _finite(values) -> list[float | None]:
    """JSON has no NaN: a diverged step's loss is a gap in the line."""
    return [value if math.isfinite(value) else None for value in values]


def _thin(rows: list[dict], limit: int) -> list[dict]:
    """Every k-th row so at most `limit` remain, always keeping the latest one."""
    if len(rows) <= limit:
        return rows
    stride = -(-len(rows) // limit)  # ceiling division
    thinned = rows[::stride]
    return thinned if thinned[-1] is rows[-1] else thinned + [rows[-1]]


HEAD_SCORE_LINES = 3  # per pattern: the strongest heads only, so the chart stays legible
ONSET_COLOR = VERMILLION


def head_scores_plot(curves: dict[str, tuple[list[int], torch.Tensor] | None], onset: int | None) -> PlotData:
    """Each head's pattern scores over training, one panel per pattern (`curves`: pattern -> (steps,
    (F, L, H) scores), as `AttentionMovie.curves` gives them, or None where the probe cannot
    show it), the HEAD_SCORE_LINES heads that scored highest in each (the strongest in the palette's
    first colour, and so on); a vertical marker at `onset`, the step an induction head formed.

    A live run redraws it at every snapshot, so, like the loss chart, it comes as Plotly JSON: plain
    traces and a layout built once per set of panels and onset (a checked figure cost ~30 ms each time:
    the largest part of sixty learners' first updates).
    """
    traces = []
    for row, (pattern, curve) in enumerate(curves.items(), start=1):
        if curve is None:
            continue
        steps, scores = curve
        n_head = scores.size(2)
        strongest = scores.amax(0).flatten().topk(min(HEAD_SCORE_LINES, scores[0].numel())).indices.tolist()
        axis = "" if row == 1 else str(row)
        for rank, index in enumerate(strongest):
            layer, head = divmod(index, n_head)
            traces.append(dict(
                type="scatter", x=list(steps), y=_finite(scores[:, layer, head].tolist()), mode="lines",
                name=f"L{layer} H{head}", legendgroup=pattern, showlegend=False,
                line=dict(color=PALETTE[rank], width=1.5),
                xaxis=f"x{axis}", yaxis=f"y{axis}",
                hovertemplate=f"L{layer} H{head}<br>step %{{x}}<br>{pattern} %{{y:.2f}}<extra></extra>",
            ))
    layout = _scores_layout_json(tuple(curves), tuple(curve is None for curve in curves.values()), onset)
    return plotly_json(f'{{"data":{json.dumps(traces)},"layout":{layout}}}')


@functools.lru_cache(maxsize=64)
def _scores_layout_json(patterns: tuple[str, ...], missing: tuple[bool, ...], onset: int | None) -> str:
    """The head scores' layout as JSON: a panel per pattern (a note where the probe cannot show it),
    the onset marker through every panel."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(patterns), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"{pattern} score" for pattern in patterns])
    for row, absent in enumerate(missing, start=1):
        if absent:
            fig.add_annotation(text="the probe prompt cannot show this pattern", showarrow=False,
                               xref=f"x{row if row > 1 else ''} domain", yref=f"y{row if row > 1 else ''} domain",
                               x=0.5, y=0.5, font=dict(size=11, color="#6b7280"))
        else:
            fig.update_yaxes(range=[-0.05, 1.05], row=row, col=1)
    if onset is not None:
        fig.add_vline(x=onset, line=dict(color=ONSET_COLOR, dash="dash", width=1.5), exclude_empty_subplots=False)
        fig.add_annotation(text=f"induction head forms (step {onset:,})", x=onset, xref="x", y=1.0, yref="paper",
                           yanchor="bottom", showarrow=False, font=dict(size=11, color=ONSET_COLOR))
    fig.update_xaxes(title_text="step", row=len(patterns), col=1)
    fig.update_layout(height=110 + 110 * len(patterns), margin=dict(l=45, r=10, t=60, b=40), template="plotly_white",
                      title=dict(text="Head scores over training (the strongest heads)", font=dict(size=14), x=0),
                      uirevision="head-scores")
    fig.update_annotations(font_size=11)
    return json.dumps(fig.to_plotly_json()["layout"])


@functools.lru_cache(maxsize=8)
def note_plot(text: str) -> PlotData:
    """`note_figure` serialised once, for a stream that sends it with every update."""
    return plotly_json(note_figure(text).to_json())
