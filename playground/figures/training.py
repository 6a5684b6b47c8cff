"""Figures of a training run: the live loss chart."""

from __future__ import annotations

import plotly.graph_objects as go

MAX_POINTS = 600  # per line: a long run stays a small payload at several updates a second
TRAIN_COLOR = "#6366f1"
VAL_COLOR = "#f59e0b"
ANSWER_COLOR = "#10b981"


def loss_figure(history: list[dict], max_iters: int | None = None) -> go.Figure:
    """Training loss (every step, thinned to MAX_POINTS) and validation loss (its eval steps).

    `history` rows are dicts with 'step', 'train_loss' and optionally 'val_loss' (None between
    evaluations) and, for a task corpus, 'answer_loss' and 'answer_accuracy', as in
    `core.train.Trainer.history`; the answers' loss is a third line. `max_iters` fixes the x range so the curve
    grows from left to right instead of rescaling on every update.
    """
    train = [row for row in history if row.get("train_loss") is not None]
    val = [row for row in history if row.get("val_loss") is not None]
    train = _thin(train, MAX_POINTS)
    fig = go.Figure()
    fig.add_scatter(
        x=[r["step"] for r in train], y=[r["train_loss"] for r in train], name="train",
        mode="lines", line=dict(color=TRAIN_COLOR, width=1.5),
        hovertemplate="step %{x}<br>train loss %{y:.4f}<extra></extra>",
    )
    fig.add_scatter(
        x=[r["step"] for r in val], y=[r["val_loss"] for r in val], name="validation",
        mode="lines+markers", line=dict(color=VAL_COLOR, width=2), marker=dict(size=6),
        hovertemplate="step %{x}<br>validation loss %{y:.4f}<extra></extra>",
    )
    answers = [row for row in history if row.get("answer_loss") is not None]
    if answers:  # a task corpus: the loss on what can be learned, beside the floor of the whole line
        fig.add_scatter(
            x=[r["step"] for r in answers], y=[r["answer_loss"] for r in answers], name="answers (val)",
            mode="lines+markers", line=dict(color=ANSWER_COLOR, width=2, dash="dot"), marker=dict(size=5),
            customdata=[r["answer_accuracy"] for r in answers],
            hovertemplate="step %{x}<br>loss on the answers %{y:.4f}<br>%{customdata:.0%} right<extra></extra>",
        )
    fig.update_layout(
        height=300, margin=dict(l=50, r=10, t=55, b=40), template="plotly_white",  # room for the block label
        legend=dict(orientation="h", x=1, y=1.0, xanchor="right", yanchor="bottom"),
        xaxis_title="step", yaxis_title="loss (nats)",
        uirevision="loss",  # keep the user's zoom while the chart updates
    )
    if max_iters:
        fig.update_xaxes(range=[0, max(max_iters, history[-1]["step"] if history else 0)])
    if not history:
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.add_annotation(
            text="Press Train: the loss appears here as the model learns.", showarrow=False,
            x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14, color="#6b7280"),
        )
    return fig


def _thin(rows: list[dict], limit: int) -> list[dict]:
    """Every k-th row so at most `limit` remain, always keeping the latest one."""
    if len(rows) <= limit:
        return rows
    stride = -(-len(rows) // limit)  # ceiling division
    thinned = rows[::stride]
    return thinned if thinned[-1] is rows[-1] else thinned + [rows[-1]]
