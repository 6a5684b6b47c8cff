"""Plotly figure builders: pure functions from numbers and labels to `go.Figure` (no Gradio).

Never imports a tab, the sessions or core's training: figures draw the numbers they are given.
"""

import textwrap

import plotly.graph_objects as go

# Every categorical colour of the figures (head labels, heads, runs, rungs, the baby GPT's chain, the
# loss curves) comes from Okabe and Ito's palette ("Color Universal Design", 2008), made to stay
# distinct under the common colour-vision deficiencies (protanopia, deuteranopia, tritanopia; about
# 1 man in 12 has one), where plotly's defaults put red beside green. Ordered so that the first
# four, which compared runs use together, differ most; yellow, faint on white, comes last.
# (tests/test_palette.py checks the palette under each deficiency.)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442")
BLUE, ORANGE, GREEN, PURPLE, VERMILLION, SKY, BLACK, YELLOW = PALETTE
PALE_GREY = "#DDDDDD"  # no colour of its own: a head with no clear pattern

# A placeholder's line in characters: it fits the narrowest plot (280 px, on a laptop's 1366 px and on a phone).
NOTE_CHARS = 38


def wrapped(text: str, width: int = NOTE_CHARS) -> str:
    """`text` in lines of at most `width` characters: Plotly never wraps an annotation, so a long sentence
    is cut off at the figure's edges."""
    return "<br>".join(line for part in text.split("<br>") for line in textwrap.wrap(part, width))


def note_figure(text: str, height: int = 220) -> go.Figure:
    """A small empty figure that only says `text` (no axes to puzzle over)."""
    fig = go.Figure()
    fig.add_annotation(text=wrapped(text), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=13, color="#6b7280"))
    fig.update_layout(height=height, template="plotly_white", margin=dict(l=10, r=10, t=10, b=10),
                      xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig
