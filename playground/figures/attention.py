"""Plotly figures of attention: the layer x head grid, one large head, the head view, the summary.

Figures only draw; the numbers (maps, pooling, summaries) come from `core.attention`.
Every figure stays under 2 MB of JSON, even for 12 layers x 12 heads x 256 tokens: the grid
pools maps to fit a fixed JSON budget and says so in its title.

Never imports a tab, the sessions or gradio: figures draw the numbers they are given.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterator

import numpy as np
import plotly.graph_objects as go
import torch

from core.attention import LABELS, PATTERNS, STRONG_PATTERN, HeadSummary, pool_attention, pool_keys
from core.attribution import LARGE_EFFECT, HeadEffects
from playground.figures import BLUE, GREEN, ORANGE, PALE_GREY, PALETTE, PURPLE, SKY, VERMILLION, YELLOW

COLORSCALE = "Blues"
# The head view's heads: the palette's colours, then again dashed, then dotted (more heads than that repeat).
HEAD_DASHES = ("solid", "dash", "dot")
GRID_JSON_BUDGET = 1_500_000  # bytes of JSON for the whole grid, safely under the 2 MB a figure may take
JSON_PER_CELL = 7  # a float32 as base64 with plotly's escaping
GROUP_GAP = 0.35  # the space between groups of heads that share keys and values, in panel widths
JSON_PER_HEAD = 1_200  # each subplot's axes, title, token labels and hover template
LARGE_MAX_TOKENS = 256  # the single-head view pools only beyond this
HEAD_VIEW_MAX_ROWS = 64  # token rows in the head view before keys are grouped
TICK_LABELS_MAX = 48  # more tokens than this on an axis and tick labels become unreadable
# Gradio draws the block label over a figure's top left and plotly its toolbar over the top
# right: titles start below both, and the top margin makes room for a title and a subtitle.
TITLE_TOP_PX = 42
TOP_MARGIN_PX = 104
TOOLBAR_REMOVED = ["zoom", "pan", "select", "lasso", "zoomin", "zoomout", "autoscale", "resetscale"]
# Each label's colour (`core.attention.LABELS`: the patterns, "uniform", "mixed"); a test checks every label has one.
LABEL_COLORS = {
    "previous-token": BLUE, "first-token": PURPLE, "self": GREEN, "fixed-offset": SKY,
    "induction": VERMILLION, "mirror": ORANGE, "uniform": YELLOW, "mixed": PALE_GREY,
}


def axis_labels(labels: list[str], spans: list[tuple[int, int]]) -> list[str]:
    """Unique category names for a heatmap axis ("#3 e", or "#8-15 the cat" for a pooled group).

    The position makes repeated tokens distinct; plotly would merge equal categories.
    """
    names = []
    for start, end in spans:
        text = "".join(labels[start:end])
        text = text if len(text) <= 12 else text[:11] + "…"
        names.append(f"#{start} {text}" if end - start == 1 else f"#{start}-{end - 1} {text}")
    return names


def _pooling_note(spans: list[tuple[int, int]], n_tokens: int) -> str:
    size = spans[0][1] - spans[0][0]
    return "" if size == 1 else f"Pooled: {n_tokens} tokens in groups of {size}; rows still sum to 1"


def _hover(row: str, head: int, pooled: bool, shared: str = "") -> str:
    what = "share of the query group's attention on the key group" if pooled else "weight"
    return f"{row} head {head}{shared}<br>query %{{y}}<br>key %{{x}}<br>{what} %{{z:.4f}}<extra></extra>"


def _top(title: str, note: str = "") -> dict:
    """Layout for a figure's top: its title below the block label and the toolbar, `note` (if any)
    as a smaller second line, and a toolbar short enough to leave a phone's block label clear
    (dragging still zooms, a double click resets)."""
    return dict(
        title=dict(text=title, subtitle=dict(text=note, font=dict(size=11)), font=dict(size=15), x=0,
                   xref="paper", xanchor="left", y=1, yref="container", yanchor="top", pad=dict(t=TITLE_TOP_PX)),
        modebar=dict(remove=TOOLBAR_REMOVED),
    )


def heatmap_grid(maps: torch.Tensor, labels: list[str], *, json_budget: int = GRID_JSON_BUDGET,
                 title: str = "Attention of every head", group: int = 1) -> go.Figure:
    """Every layer (rows) x head (columns) of maps (L, H, T, T) as heatmaps on one colour scale; with
    grouped queries, `group` adjacent query heads share each key/value head (set apart by a gap).

    Maps are block-pooled to the largest size whose JSON fits `json_budget` (the subtitle says so).
    """
    return heatmap_rows([(f"L{layer}", maps[layer], labels) for layer in range(maps.size(0))],
                        json_budget=json_budget, title=title, group=group)


def heatmap_rows(rows: list[tuple[str, torch.Tensor, list[str]]], *, json_budget: int = GRID_JSON_BUDGET,
                 title: str, group: int = 1) -> go.Figure:
    """Rows of heatmaps on one colour scale: each row (name, maps (H, T, T), token labels) has its own
    heads and tokens (a layer of one model, or one run among others), its panels titled "{name} H{head}";
    where `group` query heads share a key/value head, each group stands apart and the hover names it.

    Maps are block-pooled to the largest size whose JSON fits `json_budget` (the subtitle says so).
    """
    n_rows, n_cols = len(rows), max(maps.size(0) for _, maps, _ in rows)
    gaps = n_cols // group - 1 if group > 1 else 0  # between groups of heads that share keys and values
    span = n_cols + GROUP_GAP * gaps  # the grid's width in panels
    n_heads = sum(maps.size(0) for _, maps, _ in rows)
    side = max(1, math.isqrt(max(0, json_budget - n_heads * JSON_PER_HEAD) // (n_heads * JSON_PER_CELL)))
    # Axes laid out by hand: plotly's make_subplots validates each update and takes seconds for 144 heads.
    data, layout, titles, notes, n = [], {}, [], set(), 0
    for row, (name, maps, labels) in enumerate(rows):
        pooled, spans = pool_attention(maps.float(), side)  # (H, N, N)
        names = axis_labels(labels, spans)
        show_ticks = len(names) <= TICK_LABELS_MAX and n_cols <= 4
        values = pooled.numpy().astype(np.float32)
        notes.add(_pooling_note(spans, maps.size(-1)))
        if group > 1:
            notes.add(f"grouped queries: each {group} adjacent heads share one key/value head")
        for head in range(maps.size(0)):
            n += 1
            shared = f" (key/value head {head // group})" if group > 1 else ""
            data.append(go.Heatmap(
                z=values[head], x=names, y=names, coloraxis="coloraxis", xaxis=f"x{n}", yaxis=f"y{n}",
                hovertemplate=_hover(name, head, len(spans) < maps.size(-1), shared),
            ))
            x0, y1 = (head + GROUP_GAP * (head // group if group > 1 else 0)) / span, 1 - row / n_rows
            layout[f"xaxis{n}"] = dict(
                domain=[x0, x0 + 0.92 / span], anchor=f"y{n}", type="category", ticks="",
                showticklabels=show_ticks and row == n_rows - 1, tickangle=-90,
                # on a narrow screen the edge labels of side-by-side heads would run into each other
                ticklabeloverflow="hide past domain",
            )
            layout[f"yaxis{n}"] = dict(
                domain=[y1 - 0.85 / n_rows, y1 - 0.07 / n_rows], anchor=f"x{n}", type="category",
                ticks="", autorange="reversed", showticklabels=show_ticks and head == 0,
            )
            titles.append(dict(text=f"{name} H{head}", x=x0 + 0.46 / span, y=y1, xref="paper", yref="paper",
                               xanchor="center", yanchor="top", showarrow=False, font=dict(size=10)))
    cell_px = max(70, min(220, 960 // n_cols))
    return go.Figure(data=data, layout=dict(
        layout, annotations=titles, **_top(title, "; ".join(sorted(note for note in notes if note))),
        coloraxis=dict(colorscale=COLORSCALE, cmin=0, cmax=1, colorbar=dict(title="weight", thickness=12)),
        height=n_rows * cell_px + TOP_MARGIN_PX + 60, margin=dict(l=50, r=20, t=TOP_MARGIN_PX, b=40),
        plot_bgcolor="white",
    ))


def live_heatmap(maps: torch.Tensor, labels: list[str]) -> go.Figure:
    """A small grid for the Train tab's live view of a probe prompt: maps (H, T, T) or (L, H, T, T)."""
    if maps.dim() == 3:
        maps = maps[None]
    # refreshed a few times a second while training: a small budget keeps each update light
    fig = heatmap_grid(maps, labels, json_budget=150_000, title="Attention on the probe prompt")
    fig.update_layout(height=min(fig.layout.height, 120 * maps.size(0) + TOP_MARGIN_PX + 60))
    return fig


def head_heatmap(weights: torch.Tensor, labels: list[str], layer: int, head: int) -> go.Figure:
    """One head's map (T, T) large, with token labels on both axes.

    Plotly thins the tick labels to what fits the drawn width, so they never overlap on a phone;
    hover shows every cell's tokens.
    """
    n_tokens = weights.size(-1)
    pooled, spans = pool_attention(weights, LARGE_MAX_TOKENS)
    names = axis_labels(labels, spans)
    ticks = dict(type="category", tickfont=dict(size=10))
    fig = go.Figure(go.Heatmap(
        z=pooled.numpy().astype(np.float32), x=names, y=names, colorscale=COLORSCALE, zmin=0, zmax=1,
        colorbar=dict(title="weight", thickness=12), hovertemplate=_hover(f"L{layer}", head, len(spans) < n_tokens),
    ))
    fig.update_xaxes(title="key (attended to)", tickangle=-90, **ticks)
    fig.update_yaxes(title="query (looking)", autorange="reversed", **ticks)
    fig.update_layout(
        **_top(f"Layer {layer}, head {head}", _pooling_note(spans, n_tokens)),
        height=640, margin=dict(l=70, r=20, t=TOP_MARGIN_PX, b=70), plot_bgcolor="white",
    )
    return fig


def head_view(weights: torch.Tensor, labels: list[str], query_index: int, layer: int) -> go.Figure:
    """Where one query token looks in each head of a layer, bertviz style.

    weights: (H, T) attention of the query over the keys. Tokens stand in two columns; a line
    from the query (left) to a key (right) is as opaque and thick as its weight, one colour per
    head. Click a head in the legend to hide it, double-click to see it alone.
    """
    n_head, n_tokens = weights.shape
    pooled, spans = pool_keys(weights, HEAD_VIEW_MAX_ROWS)  # (H, N)
    query_row = next(row for row, (start, end) in enumerate(spans) if start <= query_index < end)
    names = axis_labels(labels, spans)
    rows = len(spans)
    fig = go.Figure()
    for head in range(n_head):
        _add_head_lines(fig, pooled[head].tolist(), query_row, head)
    # hover points on the key column carry every head's exact weight
    per_head = pooled.tolist()
    hover = ["<br>".join(f"head {h}: {per_head[h][row]:.4f}" for h in range(n_head)) for row in range(rows)]
    fig.add_trace(go.Scatter(
        x=[1] * rows, y=list(range(rows)), mode="markers", marker=dict(size=6, color="rgba(0,0,0,0.15)"),
        customdata=hover, hovertemplate="key %{text}<br>%{customdata}<extra></extra>", text=names,
        showlegend=False,
    ))
    for side, x in (("query", -0.02), ("key", 1.02)):
        fig.add_trace(go.Scatter(
            x=[x] * rows, y=list(range(rows)), mode="text", text=names, hoverinfo="skip", showlegend=False,
            textposition="middle left" if side == "query" else "middle right",
            textfont=dict(size=11, color=[VERMILLION if (side == "query" and r == query_row) else
                                          ("#bbbbbb" if r > query_row else "#222222") for r in range(rows)]),
        ))
    note = "Click a head in the legend to hide it"
    if rows < n_tokens:
        note += f"; keys grouped by {spans[0][1] - spans[0][0]}, a group's weight is their sum"
    fig.update_xaxes(visible=False, range=[-0.6, 1.6])
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(
        **_top(f"Layer {layer}: where {names[query_row]} looks", note),
        height=max(320, 18 * rows + TOP_MARGIN_PX + 70), margin=dict(l=10, r=10, t=TOP_MARGIN_PX, b=10),
        plot_bgcolor="white",
        # below the tokens, across: a legend at the side would squeeze the two columns on a phone
        legend=dict(orientation="h", y=0, yanchor="top"),
    )
    return fig


def _add_head_lines(fig: go.Figure, weights: list[float], query_row: int, head: int) -> None:
    """One legend entry per head, in its colour and dash; its lines are bucketed by weight since a
    trace has one opacity."""
    rounds, colour = divmod(head, len(PALETTE))
    style = dict(color=PALETTE[colour], dash=HEAD_DASHES[rounds % len(HEAD_DASHES)])
    levels = 5
    buckets: dict[int, list] = {}
    for row, weight in enumerate(weights):
        if weight >= 0.01:  # lighter lines would be invisible anyway
            level = min(levels, math.ceil(weight * levels))
            buckets.setdefault(level, []).append(row)
    first = True
    for level in sorted(buckets, reverse=True):
        xs, ys = [], []
        for row in buckets[level]:
            xs += [0, 1, None]
            ys += [query_row, row, None]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", line=dict(style, width=1 + 1.5 * level),
            opacity=0.15 + 0.85 * level / levels, hoverinfo="skip",
            name=f"head {head}", legendgroup=f"head {head}", showlegend=first,
        ))
        first = False
    if first:  # nothing visible: still list the head so the legend has every head
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=style,
                                 name=f"head {head}", legendgroup=f"head {head}"))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _share(effects: HeadEffects | None, s: HeadSummary) -> float | None:
    return None if effects is None else effects.shares[s.layer, s.head].item()


def _is_large(effects: HeadEffects | None, s: HeadSummary) -> bool:
    return effects is not None and bool(effects.large()[s.layer, s.head])


def _label_cell(s: HeadSummary, effects: HeadEffects | None) -> str:
    """The label, and for a head with a large effect its share: "mixed · 35% of the effect"."""
    if not _is_large(effects, s):
        return s.label
    return f"{s.label} · {_share(effects, s):.0%} of the effect"


# The per-head table: short headers that fit their columns whole (SUMMARY_LEGEND explains them),
# the explanation early so a learner reads it before the numbers, and widths in pixels.
# 1170 px in all: every column shows at 1366 px; on a phone the explanation fits the screen once scrolled to.
# Each pattern's column (`core.attention.PATTERNS`, keyed by name; a test checks every pattern has one).
PATTERN_COLUMNS = {
    "previous-token": ("prev", 54), "first-token": ("first", 60), "self": ("self", 52),
    "fixed-offset": ("offset", 68), "induction": ("induction", 92), "mirror": ("mirror", 68),
}
Cell = Callable[[HeadSummary, HeadEffects | None], object]


def _pattern_columns(name: str) -> Iterator[tuple[str, int, Cell]]:
    header, width = PATTERN_COLUMNS[name]
    yield header, width, lambda s, _effects: _fmt(s.scores[name])
    if name == "induction":  # the probe's verdict beside this text's induction score
        yield "probe", 60, lambda s, _effects: _fmt(s.probe_induction)


# (header, width, cell): one list, so the headers and the rows cannot fall out of step. A cell reads the
# head's summary and the heads' measured effects (None where there are none).
SUMMARY_COLUMNS: list[tuple[str, int, Cell]] = [
    ("layer", 60, lambda s, _e: s.layer), ("head", 54, lambda s, _e: s.head), ("label", 130, _label_cell),
    ("effect", 70, lambda s, e: "-" if _share(e, s) is None else f"{_share(e, s):+.0%}"),
    ("score", 60, lambda s, _e: _fmt(s.score)), ("what it does", 220, lambda s, _e: s.explanation),
    ("bits", 54, lambda s, _e: _fmt(s.entropy)), ("spread", 68, lambda s, _e: _fmt(s.normalized_entropy)),
    *(column for name in PATTERNS for column in _pattern_columns(name)),
]
SUMMARY_HEADERS = [header for header, _, _ in SUMMARY_COLUMNS]
SUMMARY_WIDTHS = [width for _, width, _ in SUMMARY_COLUMNS]


def _pattern_legend() -> str:
    """"**prev** (previous-token), **first** (first-token), **self**, ...": each pattern's header, its name
    where the header shortens it."""
    names = [f"**{PATTERN_COLUMNS[name][0]}**" + ("" if PATTERN_COLUMNS[name][0] == name else f" ({name})")
             for name in PATTERNS]
    return f"{', '.join(names[:-1])} and {names[-1]}"


SUMMARY_LEGEND = (
    "**effect**: the head's share of the answer's lead on this text (the note under the board says how it "
    f"was measured); a head with {LARGE_EFFECT:.0%} or more, either way, has it beside its label too. "
    "**score**: how strongly the head shows its label, 0 to 1. **bits**: the entropy of a token's attention, "
    f"averaged; **spread**: that entropy over its maximum (1 = spread evenly). {_pattern_legend()}: how well "
    "the head follows each pattern on this text, corrected for chance (0 = no more than even attention, "
    "1 = all of it; - = this text cannot show it). **probe**: its induction score on random tokens written "
    f"twice, at two lengths; a head past layer 0 with {STRONG_PATTERN:g} or more there is an induction head."
)


def summary_table(summaries: list[HeadSummary], effects: HeadEffects | None = None) -> list[list]:
    """Rows for a table with SUMMARY_HEADERS; an unmeasurable score shows as '-'."""
    return [[cell(s, effects) for _, _, cell in SUMMARY_COLUMNS] for s in summaries]


def summary_figure(summaries: list[HeadSummary], effects: HeadEffects | None = None) -> go.Figure:
    """A layer x head board: each cell coloured by the head's label, with its score, and for a head with a
    large effect its share of the answer's lead, in bold."""
    n_layer = max(s.layer for s in summaries) + 1
    n_head = max(s.head for s in summaries) + 1
    kinds = list(LABELS)
    z = np.zeros((n_layer, n_head))
    text = [["" for _ in range(n_head)] for _ in range(n_layer)]
    hover = [["" for _ in range(n_head)] for _ in range(n_layer)]
    for s in summaries:
        z[s.layer, s.head] = kinds.index(s.label)
        name = f"{s.offset} back" if s.label == "fixed-offset" else s.label
        text[s.layer][s.head] = f"{name}<br>{s.score:.2f}"
        explained = textwrap.wrap(s.explanation, 60)
        if _is_large(effects, s):
            text[s.layer][s.head] += f"<br><b>{_share(effects, s):+.0%}</b>"
        if effects is not None:
            explained.append(f"Effect on the answer ({effects.method}): {_share(effects, s):+.0%}")
        hover[s.layer][s.head] = f"layer {s.layer} head {s.head}<br>{'<br>'.join(explained)}"
    # a stepped colour scale: one flat band per label
    scale = []
    for i, kind in enumerate(kinds):
        scale += [[i / len(kinds), LABEL_COLORS[kind]], [(i + 1) / len(kinds), LABEL_COLORS[kind]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"H{h}" for h in range(n_head)], y=[f"L{layer}" for layer in range(n_layer)],
        zmin=-0.5, zmax=len(kinds) - 0.5, colorscale=scale, showscale=False, xgap=2, ygap=2,
        text=text, texttemplate="%{text}", textfont=dict(size=10 if n_head <= 8 else 8),
        customdata=hover, hovertemplate="%{customdata}<extra></extra>",
    ))
    for kind in kinds:  # a legend of the labels' colours
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=kind,
                                 marker=dict(size=12, symbol="square", color=LABEL_COLORS[kind])))
    fig.update_xaxes(side="top", type="category")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(
        **_top("Hover a head for its explanation"), height=max(300, 48 * n_layer + TOP_MARGIN_PX + 130),
        margin=dict(l=50, r=20, t=TOP_MARGIN_PX, b=20), plot_bgcolor="white", legend=dict(orientation="h", y=-0.05),
    )
    return fig



def replay_heatmap(maps: torch.Tensor, labels: list[str], step: int) -> go.Figure:
    """`live_heatmap` of a snapshot taken at training `step` (the Train tab's replay)."""
    fig = live_heatmap(maps, labels)
    fig.update_layout(title_text=f"Attention on the probe prompt at step {step:,}")
    return fig
