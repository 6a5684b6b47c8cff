"""Figures of kept runs side by side (the Train tab's Compare runs): their loss curves overlaid and
the final attention of one layer of each, a row per run. The records come from `core.runs`.

Never imports a tab, the sessions or gradio: figures draw the numbers they are given.
"""

from __future__ import annotations

import plotly.graph_objects as go

from core.runs import RunRecord
from playground.figures import PALETTE
from playground.figures.attention import heatmap_rows

RUN_COLORS = PALETTE  # the kept runs (four) take its first colours, the most distinct
COMPARE_JSON_BUDGET = 600_000  # the attention rows of up to four runs, redrawn on each choice


def run_name(record: RunRecord, varying: list[str]) -> str:
    """"Run 2: no √d scaling": the run's number and the settings that tell it from the others shown."""
    return (record.title or f"Run {record.number}") + (f": {record.describe(varying)}" if varying else "")


def compare_loss_figure(records: list[RunRecord], varying: list[str]) -> go.Figure:
    """Each run's validation loss (solid, markers) and training loss (dotted), one colour per run."""
    fig = go.Figure()
    for i, record in enumerate(records):
        color, name = RUN_COLORS[i % len(RUN_COLORS)], run_name(record, varying)
        fig.add_trace(go.Scatter(x=record.train_curve[0], y=record.train_curve[1], mode="lines",
                                 name=f"{name} (train)", legendgroup=str(record.number), showlegend=False,
                                 line=dict(color=color, width=1, dash="dot"), opacity=0.7,
                                 hovertemplate=f"{name}<br>step %{{x}}<br>train loss %{{y:.4f}}<extra></extra>"))
        fig.add_trace(go.Scatter(x=record.val_curve[0], y=record.val_curve[1], mode="lines+markers", name=name,
                                 legendgroup=str(record.number), line=dict(color=color, width=2), marker=dict(size=5),
                                 hovertemplate=f"{name}<br>step %{{x}}<br>validation loss %{{y:.4f}}<extra></extra>"))
    fig.update_layout(
        height=340, template="plotly_white", margin=dict(l=50, r=10, t=50, b=40),
        title=dict(text="Loss of each run: validation solid, training dotted", font=dict(size=14), x=0),
        xaxis_title="step", yaxis_title="loss (nats)",
        # at the figure's foot, under the axis title whatever the plot's height (a paper y overlapped "step")
        legend=dict(orientation="h", x=0, xanchor="left", y=0, yref="container", yanchor="bottom"),
    )
    return fig


def compare_attention_figure(records: list[RunRecord], layer: int) -> go.Figure:
    """A row per run ("R2" is run 2): every head of its layer `layer` (its last, if it has fewer) at its
    last step, on its own probe prompt. Runs that kept no attention are left out (the table says why)."""
    rows, fewer = [], []
    for record in records:
        if record.attention is None:
            continue
        shown = min(layer, record.attention.size(0) - 1)
        if shown != layer:
            fewer.append(f"R{record.number} shows its L{shown}")
        rows.append((f"R{record.number}", record.attention[shown], record.probe_labels))
    fig = heatmap_rows(rows, json_budget=COMPARE_JSON_BUDGET, title=f"Layer {layer} of each run, at its last step")
    if fewer:
        note = fig.layout.title.subtitle.text
        fig.update_layout(title_subtitle_text="; ".join([*fewer, *([note] if note else [])]))
    return fig
