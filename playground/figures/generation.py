"""Figures of generated text: what the model considered at one token."""

from __future__ import annotations

import plotly.graph_objects as go

CHOSEN_COLOR = "#6366f1"
OTHER_COLOR = "#c7d2fe"


def alternatives_figure(alternatives: list[tuple[int, str, float]], chosen_id: int | None, title: str = "") -> go.Figure:
    """Horizontal bars of the top candidates (id, label, probability), most likely on top;
    the token that was actually sampled is drawn in the strong colour."""
    fig = go.Figure()
    if not alternatives:
        fig.add_annotation(
            text="Generate some text, then pick a token to see what else the model considered.",
            showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=13, color="#6b7280"),
        )
    ranked = sorted(alternatives, key=lambda alt: alt[2])  # plotly draws the first bar at the bottom
    # Labels repeat (e.g. two byte pieces); the id keeps each bar on its own row.
    rows = [f"{label}  #{token_id}" for token_id, label, _ in ranked]
    fig.add_bar(
        x=[p for _, _, p in ranked], y=rows, orientation="h",
        marker_color=[CHOSEN_COLOR if token_id == chosen_id else OTHER_COLOR for token_id, _, _ in ranked],
        text=[f"{p:.1%}" for _, _, p in ranked], textposition="auto",
        hovertemplate="%{y}<br>probability %{x:.4f}<extra></extra>",
    )
    fig.update_layout(
        title=dict(text=title, font=dict(size=14)), height=60 + 34 * max(3, len(ranked)),
        margin=dict(l=10, r=10, t=40 if title else 10, b=30), template="plotly_white",
        xaxis=dict(range=[0, 1], tickformat=".0%", title="probability"), yaxis=dict(automargin=True),
        showlegend=False,
    )
    return fig
