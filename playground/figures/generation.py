"""Figures of generated text: what the model considered at one token.

Never imports a tab, the sessions or gradio: figures draw the numbers they are given.
"""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go

from playground.figures import note_figure

# The token drawn is amber here and in the Generate tab's shaded text, so the two are seen as one.
CHOSEN_COLOR = "#f59e0b"
OTHER_COLOR = "#c7d2fe"
TITLE_ROOM = 64  # px above the bars: Plotly's toolbar takes the top 30 or so, the title sits below it


def alternatives_figure(alternatives: list[tuple[int, str, float]], chosen_id: int | None, title: str = "") -> go.Figure:
    """Horizontal bars of the top candidates (id, label, probability), most likely on top;
    the token that was actually drawn is in the strong colour."""
    if not alternatives:
        return note_figure("Generate some text, then click a token to see what else the model considered.", 160)
    ranked = sorted(alternatives, key=lambda alt: alt[2])  # plotly draws the first bar at the bottom
    fig = go.Figure()
    fig.add_bar(
        x=[p for _, _, p in ranked], y=_rows(ranked), orientation="h",
        marker_color=[CHOSEN_COLOR if token_id == chosen_id else OTHER_COLOR for token_id, _, _ in ranked],
        text=[f"{p:.1%}" for _, _, p in ranked], textposition="auto",
        hovertemplate="%{y}<br>probability %{x:.4f}<extra></extra>",
    )
    fig.update_layout(
        # Anchored to the top of the bars, the title stays clear of the toolbar however long it is.
        title=dict(text=title, font=dict(size=14), x=0, xref="paper", xanchor="left",
                   y=1, yref="paper", yanchor="bottom", pad=dict(b=8)),
        height=TITLE_ROOM + 50 + 30 * max(3, len(ranked)),
        margin=dict(l=10, r=10, t=TITLE_ROOM, b=50), template="plotly_white",
        xaxis=dict(range=[0, 1], tickformat=".0%", title="probability (amber: the token drawn)"),
        yaxis=dict(automargin=True, tickfont=dict(size=14)), showlegend=False,
    )
    return fig


def _rows(ranked: list[tuple[int, str, float]]) -> list[str]:
    """One row name per bar: the token's label, with its id where labels repeat (byte pieces)."""
    counts = Counter(label for _, label, _ in ranked)
    return [label if counts[label] == 1 else f"{label} (id {token_id})" for token_id, label, _ in ranked]
