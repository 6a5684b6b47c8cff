"""Plotly figure builders: pure functions from numbers and labels to `go.Figure` (no Gradio).

Never imports a tab, the sessions or core's training: figures draw the numbers they are given.
"""

import plotly.graph_objects as go


def note_figure(text: str, height: int = 220) -> go.Figure:
    """A small empty figure that only says `text` (no axes to puzzle over)."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=13, color="#6b7280"))
    fig.update_layout(height=height, template="plotly_white", margin=dict(l=10, r=10, t=10, b=10),
                      xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig
