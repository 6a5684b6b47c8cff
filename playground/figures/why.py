"""Plotly figures of why a token was predicted: each part's direct share of a logit difference,
what patching each part of a clean run into a corrupted one restores, and a head's QK and OV
circuits token by token.

Figures only draw; every number comes from `core.attribution` (Attribution, Patching, Circuits).
Hover shows the numbers as the model holds them.

Never imports a tab, the sessions or gradio: figures draw the numbers they are given.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from core.attribution import Attribution, Circuits, Patching
from playground.figures.attention import TICK_LABELS_MAX, TOP_MARGIN_PX
from playground.figures.inside import DIVERGING, EXACT, _names, _title, head_grid

CIRCUIT_PX = 520  # the square of a circuit's heatmap, before the phone's width shrinks it


def attribution_heads(parts: Attribution, target: str, alternative: str) -> go.Figure:
    """(L, H): each head's direct share of logit(target) - logit(alternative)."""
    return head_grid(parts.heads, "Each head's direct share",  # short: plotly does not wrap titles on a phone
                     f"of logit({target}) − logit({alternative}) = {parts.difference:.3f}; red: for {target}",
                     colorbar="logit<br>share", hover="share of the logit difference")


def attribution_parts(parts: Attribution, target: str, alternative: str) -> go.Figure:
    """Bars: the embeddings, each layer's heads together and its feed-forward layer, the biases;
    they add up to the logit difference (the last bar)."""
    names, values = ["embeddings"], [parts.embeddings]
    for layer, (heads, feed_forward) in enumerate(zip(parts.heads.sum(-1).tolist(), parts.feed_forward.tolist())):
        names += [f"L{layer} heads", f"L{layer} feed-forward"]
        values += [heads, feed_forward]
    names += ["biases", "total"]
    values += [parts.biases, parts.difference]
    colors = ["#d62728" if value > 0 else "#1f77b4" for value in values[:-1]] + ["#444444"]
    fig = go.Figure(go.Bar(
        x=names, y=values, marker_color=colors, text=[f"{v:+.2f}" for v in values], textposition="outside",
        hovertemplate=f"%{{x}}<br>%{{y:{EXACT}}}<extra></extra>", cliponaxis=False,
    ))
    fig.update_xaxes(type="category", tickangle=-45)
    fig.update_yaxes(zeroline=True, zerolinecolor="#888")
    fig.update_layout(
        **_title(f"logit({target}) − logit({alternative})",
                 "Part by part; the final norm's scale frozen"),
        height=420, margin=dict(l=50, r=20, t=TOP_MARGIN_PX + 10, b=110), plot_bgcolor="white",
    )
    return fig


def patching_residual(result: Patching, labels: list[str]) -> go.Figure:
    """Depth (the embeddings, then each layer's output) x position: the share of the clean logit
    difference restored by patching the clean stream there into the corrupted run."""
    depths = ["embeddings"] + [f"after L{layer}" for layer in range(result.residual.size(0) - 1)]
    names = _names(labels)
    values = result.residual.float().numpy()
    fig = go.Figure(go.Heatmap(
        z=values, x=names, y=depths, colorscale=DIVERGING, zmin=-1, zmax=1, xgap=1, ygap=1,
        colorbar=dict(title=dict(text="restored", side="top"), thickness=10, tickvals=[-1, 0, 1]),
        hovertemplate=f"%{{y}}, at %{{x}}<br>restored %{{z:{EXACT}}}<extra></extra>",
    ))
    fig.update_xaxes(type="category", tickangle=-90, tickfont=dict(size=10),
                     showticklabels=len(labels) <= TICK_LABELS_MAX)
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_layout(
        **_title("Patching the stream, place by place",
                 "1 = the clean answer back, 0 = as corrupted"),
        height=max(300, 36 * len(depths) + TOP_MARGIN_PX + 110), margin=dict(l=90, r=20, t=TOP_MARGIN_PX + 20, b=80),
        plot_bgcolor="white",
    )
    return fig


def patching_heads(result: Patching) -> go.Figure:
    """(L, H): the share restored by patching one head's clean output at every position."""
    return head_grid(result.heads, "Patching one head's output", "1 = the clean answer back, 0 = as corrupted",
                     colorbar="restored", hover="restored", span=1.0)


def circuit_figure(matrix: torch.Tensor, rows: list[str], columns: list[str], title: str, note: str,
                   row_title: str, column_title: str, hover: str) -> go.Figure:
    """A circuit: rows x columns, diverging colours around 0 on the matrix's own scale."""
    values = matrix.float().numpy()
    span = float(np.abs(values).max()) or 1.0
    fig = go.Figure(go.Heatmap(
        z=values, x=columns, y=rows, colorscale=DIVERGING, zmin=-span, zmax=span,
        colorbar=dict(thickness=10),
        hovertemplate=f"{row_title} %{{y}}, {column_title} %{{x}}<br>{hover} %{{z:{EXACT}}}<extra></extra>",
    ))
    small = len(columns) <= TICK_LABELS_MAX
    fig.update_xaxes(type="category", title=column_title, showticklabels=small, tickfont=dict(size=9))
    fig.update_yaxes(type="category", title=row_title, autorange="reversed", showticklabels=small,
                     tickfont=dict(size=9))
    fig.update_layout(**_title(title, note), height=CIRCUIT_PX + TOP_MARGIN_PX,
                      margin=dict(l=70, r=20, t=TOP_MARGIN_PX, b=60), plot_bgcolor="white")
    return fig


def circuit_figures(circuit: Circuits, tokens: list[str]) -> tuple[go.Figure, go.Figure]:
    """The QK circuit (with the positional one beside it where positions are learned, as one
    figure's second panel would crowd a phone: below it) and the OV circuit."""
    name = f"L{circuit.layer} H{circuit.head}"
    qk = circuit_figure(circuit.qk, tokens, tokens, f"{name} QK: what a query seeks",
                        "Scores before the softmax, by token", "query", "key", "score")
    ov = circuit_figure(circuit.ov, tokens, tokens, f"{name} OV: what a token writes",
                        f"Added to each logit; copying score {circuit.copying_score:+.2f}",
                        "attended", "logit of", "adds")
    return qk, ov


def positional_figure(circuit: Circuits) -> go.Figure:
    """The positional QK circuit: query position x key position (learned positions only)."""
    places = [str(t) for t in range(circuit.positional_qk.size(0))]
    return circuit_figure(circuit.positional_qk, places, places,
                          f"L{circuit.layer} H{circuit.head} QK, by position",
                          "Scores before the softmax, by position", "query position",
                          "key position", "score")
