"""Plotly figures of the baby GPT's Markov chain: the transition graph and model-vs-data heatmaps.

The graph puts the states on a circle (state 0 at the top, clockwise). Each edge is a curve that
bows inwards, the two directions between a pair of states by different amounts so they never
overlap; a self-loop is a small circle outside its state. An edge's colour and width grow with
its probability; its arrowhead carries the exact colour, its label reads `token (p%)`.
All numbers come from `core.babygpt`; this module only places and paints them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence

import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from core.babygpt import ChainAnalysis, Edge, TransitionGraph

AXIS_LIMIT = 1.5  # the circle has radius 1; room for self-loops and labels
BUCKETS = 10  # edges are drawn as one line trace per probability decile
CURVE_POINTS = 24
# Every edge has hover text; labels: all up to 16 states, confident edges up to 32, then none.
MAX_ALL_LABELS, MAX_CONFIDENT_LABELS, CONFIDENT = 16, 32, 0.8
BEND, BACK_BEND = 0.1, 0.3  # how far an edge bows inwards, relative to its length
LABEL_DISTANCE = 0.4  # how far from its source state an edge's label sits (at most mid-way)
LABEL_STAGGER = 0.15  # further for each next token
LABEL_OFFSET = 0.05  # and how far to the side of its line
SEEN_COLOUR, UNSEEN_COLOUR, WALK_COLOUR = "#4f46e5", "#f59e0b", "rgba(245, 158, 11, 0.45)"
# Probability -> colour: the light end of "Blues" is invisible on white, so start a quarter in.
COLORSCALE = [[x / 10, sample_colorscale("Blues", 0.25 + 0.75 * x / 10)[0]] for x in range(11)]

Point = tuple[float, float]


def _colour(probability: float) -> str:
    return sample_colorscale(COLORSCALE, min(max(probability, 0.0), 1.0))[0]


def _node_px(n_states: int) -> int:
    return 44 if n_states <= 8 else 34 if n_states <= 16 else 24 if n_states <= 32 else 16


def _height(n_states: int) -> int:
    return 640 if n_states <= 32 else 820


def _labelled(n_states: int, probability: float) -> bool:
    return n_states <= MAX_ALL_LABELS or (n_states <= MAX_CONFIDENT_LABELS and probability >= CONFIDENT)


def _positions(n_states: int) -> list[Point]:
    angles = (math.pi / 2 - 2 * math.pi * i / n_states for i in range(n_states))
    return [(math.cos(a), math.sin(a)) for a in angles]


def _edge_curve(start: Point, end: Point, node_r: float, forward: bool) -> list[Point]:
    """Points of a curve from the rim of one node to the rim of another (or a loop back).

    `forward` tells the two directions between a pair of states apart (source < target)."""
    if start == end:  # a self-loop: a circle just outside the node, away from the centre
        loop_r = max(node_r, 0.07)
        norm = math.hypot(*start) or 1.0
        ux, uy = start[0] / norm, start[1] / norm
        cx, cy = start[0] + ux * (node_r + 0.6 * loop_r), start[1] + uy * (node_r + 0.6 * loop_r)
        back = math.atan2(-uy, -ux)  # the direction from the loop's centre to the node
        angles = (back + 0.9 + (2 * math.pi - 1.8) * i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS))
        return [(cx + loop_r * math.cos(a), cy + loop_r * math.sin(a)) for a in angles]
    (x0, y0), (x2, y2) = start, end
    length = math.hypot(x2 - x0, y2 - y0)
    # A quadratic Bezier curve bowing towards the centre, so it never runs over the states on the
    # rim; the two directions between a pair bow by different amounts so they stay apart.
    mx, my = (x0 + x2) / 2, (y0 + y2) / 2
    nx, ny = (y2 - y0) / length, -(x2 - x0) / length  # unit normal
    inward = nx * -mx + ny * -my
    if inward < -1e-9 or (abs(inward) <= 1e-9 and forward):
        nx, ny = -nx, -ny
    bend = (BEND if forward else BACK_BEND) * length
    x1, y1 = mx + bend * nx, my + bend * ny
    points = []
    for i in range(CURVE_POINTS):
        t = i / (CURVE_POINTS - 1)
        points.append((
            (1 - t) ** 2 * x0 + 2 * (1 - t) * t * x1 + t**2 * x2,
            (1 - t) ** 2 * y0 + 2 * (1 - t) * t * y1 + t**2 * y2,
        ))
    gap = min(node_r * 1.15, 0.4 * length)  # neighbours on a crowded circle may nearly touch
    return [p for p in points if math.dist(p, start) >= gap and math.dist(p, end) >= gap]


def _label_point(curve: list[Point], start: Point, end: Point, token: int) -> Point:
    if start == end:  # beyond the far side of the loop
        far = curve[len(curve) // 2]
        return start[0] + 1.45 * (far[0] - start[0]), start[1] + 1.45 * (far[1] - start[1])
    # Near the source, so the labels of long edges through the middle do not pile up there (each
    # token at its own distance, so the edges leaving one state do not share a spot), and beside
    # the line (to its right), so a thick line does not run through its own label.
    reach = min(LABEL_DISTANCE + LABEL_STAGGER * token, 0.5 * math.dist(start, end))
    i = next((i for i, p in enumerate(curve) if math.dist(p, start) >= reach), len(curve) // 2)
    (xa, ya), (xb, yb) = curve[max(i - 1, 0)], curve[min(i + 1, len(curve) - 1)]
    norm = math.hypot(xb - xa, yb - ya) or 1.0
    return curve[i][0] + LABEL_OFFSET * (yb - ya) / norm, curve[i][1] - LABEL_OFFSET * (xb - xa) / norm


def _arrow_angle(curve: list[Point]) -> float:
    """Plotly's marker angle (degrees clockwise from up) of the curve's last segment."""
    (xa, ya), (xb, yb) = curve[-2], curve[-1]
    return math.degrees(math.atan2(xb - xa, yb - ya))


def _polyline(curves: Sequence[list[Point]]) -> tuple[list, list]:
    """One line through several curves (None breaks it); 3 decimals are a pixel and a third of
    the JSON of full floats, which matters at 5 frames a second."""
    xs, ys = [], []
    for curve in curves:
        xs += [round(x, 3) for x, _ in curve] + [None]
        ys += [round(y, 3) for _, y in curve] + [None]
    return xs, ys


def chain_figure(
    graph: TransitionGraph,
    *,
    unseen: Collection[int] = (),
    walk: Sequence[int] | None = None,
    title: str = "",
) -> go.Figure:
    """The transition graph; `unseen` states are marked, a `walk` (list of states) is highlighted."""
    n = len(graph.labels)
    positions = _positions(n)
    node_px = _node_px(n)
    px_per_unit = (_height(n) - 90) / (2 * AXIS_LIMIT)  # about: the plot keeps a 1:1 aspect ratio
    node_r = node_px / 2 / px_per_unit
    curves = {
        (e.source, e.target): _edge_curve(positions[e.source], positions[e.target], node_r, e.source < e.target)
        for e in graph.edges
    }
    fig = go.Figure()

    if walk:
        steps = Counter(zip(walk, walk[1:]))
        xs, ys = _polyline([curves[step] for step in steps])
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", line=dict(color=WALK_COLOUR, width=12), hoverinfo="skip",
            name=f"walk: {len(walk) - 1} steps", legendrank=3,
        ))

    by_bucket: dict[int, list[Edge]] = {}
    for edge in graph.edges:
        by_bucket.setdefault(min(int(edge.probability * BUCKETS), BUCKETS - 1), []).append(edge)
    for bucket, edges in sorted(by_bucket.items()):
        middle = (bucket + 0.5) / BUCKETS
        xs, ys = _polyline([curves[(e.source, e.target)] for e in edges])
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", line=dict(color=_colour(middle), width=0.5 + 6 * middle),
            hoverinfo="skip", showlegend=False,
        ))

    tips = [curves[(e.source, e.target)] for e in graph.edges]
    hover = [
        f"{graph.labels[e.source]} → {graph.labels[e.target]}<br>next token {graph.token_labels[e.token]}: "
        f"{e.probability:.1%}"
        for e in graph.edges
    ]
    probabilities = [e.probability for e in graph.edges]
    fig.add_trace(go.Scatter(  # arrowheads, coloured exactly, with the colour bar
        x=[round(c[-1][0], 3) for c in tips], y=[round(c[-1][1], 3) for c in tips], mode="markers",
        marker=dict(
            symbol="arrow", angle=[round(_arrow_angle(c)) for c in tips],
            size=[round(9 + 8 * p, 1) for p in probabilities],
            color=probabilities, colorscale=COLORSCALE, cmin=0, cmax=1, line=dict(width=0),
            colorbar=dict(title="p", thickness=12, len=0.5, tickformat=".0%"),
        ),
        hoverinfo="skip", showlegend=False,
    ))
    label_points = [
        _label_point(c, positions[e.source], positions[e.target], e.token) for c, e in zip(tips, graph.edges)
    ]
    fig.add_trace(go.Scatter(  # invisible targets so every edge has hover text, at its label
        x=[round(x, 3) for x, _ in label_points], y=[round(y, 3) for _, y in label_points], mode="markers",
        marker=dict(size=14, opacity=0), hovertext=hover, hoverinfo="text", showlegend=False,
    ))
    labelled = [i for i, e in enumerate(graph.edges) if _labelled(n, e.probability)]
    fig.add_trace(go.Scatter(  # labels: a trace (not annotations) so that the states draw over them
        x=[label_points[i][0] for i in labelled], y=[label_points[i][1] for i in labelled], mode="text",
        text=[f"{graph.token_labels[graph.edges[i].token]} ({graph.edges[i].probability:.0%})" for i in labelled],
        textfont=dict(size=11 if n <= MAX_ALL_LABELS else 9, color="#1f2937", shadow="0 0 3px white, 0 0 2px white"),
        hoverinfo="skip", showlegend=False,
    ))

    unseen = set(unseen)
    for is_unseen, name in ((False, "state in the training data"), (True, "never in the training data")):
        states = [s for s in range(n) if (s in unseen) == is_unseen]
        if not states and is_unseen:
            continue
        fig.add_trace(go.Scatter(
            x=[positions[s][0] for s in states], y=[positions[s][1] for s in states],
            mode="markers+text", text=[graph.labels[s] for s in states], name=name,
            textfont=dict(size=max(8, node_px // 3), color="#1f2937" if is_unseen else "white"),
            marker=dict(
                size=node_px, color="white" if is_unseen else SEEN_COLOUR,
                line=dict(color=UNSEEN_COLOUR if is_unseen else SEEN_COLOUR, width=3),
            ),
            hovertext=[f"state {graph.labels[s]}" for s in states], hoverinfo="text", legendrank=1 + is_unseen,
        ))
    if walk:
        ends = [walk[0], walk[-1]]
        fig.add_trace(go.Scatter(
            x=[positions[s][0] for s in ends], y=[positions[s][1] for s in ends], mode="markers",
            marker=dict(symbol="circle-open", size=node_px + 14, color=UNSEEN_COLOUR, line=dict(width=3)),
            hovertext=[f"walk starts at {graph.labels[walk[0]]}", f"walk ends at {graph.labels[walk[-1]]}"],
            hoverinfo="text", showlegend=False,
        ))

    axis = dict(visible=False, range=[-AXIS_LIMIT, AXIS_LIMIT], fixedrange=False)
    fig.update_layout(
        title=dict(text=title, x=0.02, font=dict(size=15)), height=_height(n),
        margin=dict(l=10, r=10, t=50, b=40), plot_bgcolor="white", paper_bgcolor="white",
        xaxis=axis, yaxis=dict(axis, scaleanchor="x", scaleratio=1),
        legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.02, yanchor="top"),
        uirevision="baby-chain",  # keep the user's zoom while frames stream in
        hoverlabel=dict(bgcolor="white"),
    )
    return fig


def comparison_figure(analysis: ChainAnalysis, labels: Sequence[str], token_labels: Sequence[str]) -> go.Figure:
    """Model probabilities and data frequencies side by side; the most disagreeing states boxed."""
    n = len(labels)
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
        subplot_titles=("The model's next-token probabilities", "The training data's frequencies"),
    )
    panels = ((analysis.probs, "model"), (analysis.data_probs, "data"))
    for col, (values, who) in enumerate(panels, start=1):
        rows = values.tolist()
        text = [
            ["unseen" if math.isnan(p) else f"{p:.0%}" for p in row] for row in rows
        ]
        z = [[None if math.isnan(p) else p for p in row] for row in rows]
        fig.add_trace(go.Heatmap(
            z=z, x=list(token_labels), y=list(labels), text=text, texttemplate="%{text}",
            textfont=dict(size=11 if n <= 32 else 8), colorscale=COLORSCALE, zmin=0, zmax=1,
            showscale=col == 1, colorbar=dict(title="p", thickness=12, tickformat=".0%"),
            xgap=1, ygap=1, hovertemplate=f"state %{{y}} → next %{{x}}: %{{text}} ({who})<extra></extra>",
        ), row=1, col=col)
    for state in analysis.most_disagreeing:
        for axis in ("", "2"):
            fig.add_shape(
                type="rect", xref=f"x{axis} domain", yref=f"y{axis}", x0=0, x1=1, y0=state - 0.5, y1=state + 0.5,
                line=dict(color=UNSEEN_COLOUR, width=3),
            )
    boxed = ", ".join(labels[s] for s in analysis.most_disagreeing)
    fig.update_yaxes(autorange="reversed", type="category", title_text="state", col=1)
    fig.update_xaxes(title_text="next token", type="category")
    fig.update_layout(
        height=max(300, (26 if n <= 16 else 15) * n + 140), margin=dict(l=10, r=10, t=70, b=40),
        title=dict(text=f"Orange boxes: where model and data disagree most ({boxed or 'none'})", x=0.02,
                   font=dict(size=13)),
        plot_bgcolor="#f3f4f6",
    )
    return fig
