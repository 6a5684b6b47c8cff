"""Plotly figures of the baby GPT's Markov chain: the transition graph and model-vs-data heatmaps.

The graph puts the states on a circle (state 0 at the top, clockwise). Each edge is a curve that
bows inwards, the two directions between a pair of states by different amounts so they never
overlap; a self-loop is a small circle outside its state. An edge's colour and width grow with
its probability; its arrowhead carries the exact colour, its label reads `token (p%)`.

The page decides the figure's width (a phone gives it a third of a desktop's) and the server
cannot know it, so the geometry lives in data units and scales with the plot: the states are
circle shapes, not pixel-sized markers, so edges end at their rims at every width and zoom;
labels sit beside their edges near the source state, never in a pile at the centre; crowded
graphs label only their likely edges; nothing sits beside the graph, where a phone has no room.
All numbers come from `core.babygpt`; this module only places and paints them.

Never imports a tab, the sessions or gradio: figures draw the numbers they are given.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from itertools import groupby

import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from core.babygpt import ChainAnalysis, Edge, TransitionGraph
from playground.figures import BLUE, ORANGE
from playground.gradio_internals import PlotData, plotly_json

AXIS_LIMIT = 1.5  # the circle has radius 1; room for self-loops and their labels
BUCKETS = 10  # edges are drawn as one line trace per probability decile
CURVE_POINTS = 24
MAX_NODE_R = 0.17  # a state's radius (data units); smaller when neighbours on the circle are close
MAX_NAMES_INSIDE = 32  # the states of bigger rings are too small for their names: those go outside
ARROW_ROOM = 0.05  # edges stop this far outside a state's rim: room for the arrowhead's tip
# Labels: every edge up to 16 edges; the likeliest of each state up to 16 states; confident ones up to 32.
MAX_ALL_LABELS, MAX_LIKELIEST_LABELS, MAX_CONFIDENT_LABELS, CONFIDENT = 16, 16, 32, 0.8
BEND, BACK_BEND = 0.1, 0.3  # how far an edge bows inwards, relative to its length
LABEL_OFFSETS = (0.07, -0.07, 0.16, -0.16)  # how far to the side of its line an edge's label may sit
PLACEMENT_ROUNDS = 2
# A label's width and height in data units when the plot is a phone's width (about 100 px a unit;
# a desktop gives more): labels placed apart by these stay apart at every width.
LABEL_SIZE = (0.45, 0.15)
# Seen states filled blue, unseen ones hollow and ringed orange (the fill tells them apart without colour);
# a walk is a wide see-through orange band under the edges, its ends ringed orange.
SEEN_COLOUR, UNSEEN_COLOUR, WALK_COLOUR, WALK_OPACITY = BLUE, ORANGE, ORANGE, 0.45
SEEN, UNSEEN = "in the data", "never in the data"  # short: the legend fits one line on a phone
# Probability -> colour: the light end of "Blues" is invisible on white, so start a quarter in.
COLORSCALE = [[x / 10, sample_colorscale("Blues", 0.25 + 0.75 * x / 10)[0]] for x in range(11)]

Point = tuple[float, float]


def _colour(probability: float) -> str:
    return sample_colorscale(COLORSCALE, min(max(probability, 0.0), 1.0))[0]


def _node_radius(n_states: int) -> float:
    """A state's radius: at most 30% of the distance to its neighbour, so states never touch."""
    return min(MAX_NODE_R, 0.6 * math.sin(math.pi / n_states))


def _font_px(n_states: int) -> int:
    """The states' names' size; edge labels are a pixel smaller."""
    return 12 if n_states <= 9 else 10 if n_states <= 16 else 8


def _name_placement(position: Point, node_r: float) -> tuple[Point, str]:
    """Where a crowded ring's state name goes: just outside its state, on the side facing out."""
    x, y = position
    side = "middle right" if x > 0.5 else "middle left" if x < -0.5 else "top center" if y > 0 else "bottom center"
    return (x * (1 + node_r), y * (1 + node_r)), side


def _height(n_states: int) -> int:
    return 560 if n_states <= 16 else 640 if n_states <= 32 else 820


def _labelled(graph: TransitionGraph) -> list[int]:
    """The edges that get a label (every edge has hover text): all of a small graph's; of a crowded
    one, each state's likeliest edge up to 16 states, the confident edges up to 32, then none."""
    edges, n = graph.edges, len(graph.labels)
    if len(edges) <= MAX_ALL_LABELS:
        return list(range(len(edges)))
    if n <= MAX_LIKELIEST_LABELS:  # the edges leaving one state are consecutive
        by_state = groupby(range(len(edges)), key=lambda i: edges[i].source)
        return [max(group, key=lambda i: edges[i].probability) for _, group in by_state]
    return [i for i, e in enumerate(edges) if e.probability >= CONFIDENT] if n <= MAX_CONFIDENT_LABELS else []


def _positions(n_states: int) -> list[Point]:
    angles = (math.pi / 2 - 2 * math.pi * i / n_states for i in range(n_states))
    return [(math.cos(a), math.sin(a)) for a in angles]


def _edge_curve(start: Point, end: Point, node_r: float, forward: bool) -> list[Point]:
    """Points of a curve from the rim of one node to the rim of another (or a loop back).

    `forward` tells the two directions between a pair of states apart (source < target)."""
    if start == end:  # a self-loop: a circle just outside the node, away from the centre
        loop_r = max(0.6 * node_r, 0.05)
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

    def at(t: float) -> Point:
        u = 1 - t
        return u * u * x0 + 2 * u * t * x1 + t * t * x2, u * u * y0 + 2 * u * t * y1 + t * t * y2

    # Sampled from exactly `gap` beyond one state's centre to `gap` before the other's, so every
    # arrowhead sits the same small way outside its state.
    gap = min(node_r + ARROW_ROOM, 0.4 * length)  # neighbours on a crowded circle may nearly touch
    first = _crossing(lambda t: math.dist(at(t), start) - gap, 0.0, 0.5)
    last = _crossing(lambda t: gap - math.dist(at(t), end), 0.5, 1.0)
    return [at(first + (last - first) * i / (CURVE_POINTS - 1)) for i in range(CURVE_POINTS)]


def _crossing(f: Callable[[float], float], low: float, high: float) -> float:
    """Where `f`, rising from below 0 at `low` to above at `high`, crosses 0 (by bisection)."""
    for _ in range(12):  # to a ten-thousandth of the curve: far below a pixel
        middle = (low + high) / 2
        low, high = (middle, high) if f(middle) < 0 else (low, middle)
    return (low + high) / 2


def _beside(curve: list[Point], i: int, offset: float) -> Point:
    """The point `offset` to the right (negative: the left) of the curve's i-th point."""
    (xa, ya), (xb, yb) = curve[max(i - 1, 0)], curve[min(i + 1, len(curve) - 1)]
    norm = math.hypot(xb - xa, yb - ya) or 1.0
    return curve[i][0] + offset * (yb - ya) / norm, curve[i][1] - offset * (xb - xa) / norm


def _clearance(point: Point, labels: Sequence[Point], states: Sequence[Point], node_r: float) -> float:
    """How far a label at `point` is from overlapping a placed label or a state (1 or more: clear)."""
    w, h = LABEL_SIZE
    gaps = [max(abs(point[0] - x) / w, abs(point[1] - y) / h) for x, y in labels]
    gaps += [max(abs(point[0] - x) / (w / 2 + node_r), abs(point[1] - y) / (h / 2 + node_r)) for x, y in states]
    return min(gaps, default=math.inf)


def _loop_spots(loop: list[Point], state: Point) -> list[Point]:
    """Candidate centres for a self-loop's label: beyond the loop, then either side of it."""
    norm = math.hypot(*state) or 1.0
    (ux, uy), w, h = (state[0] / norm, state[1] / norm), *LABEL_SIZE
    along = [(x - state[0]) * ux + (y - state[1]) * uy for x, y in loop]  # outwards from the state
    across = max(abs((x - state[0]) * -uy + (y - state[1]) * ux) for x, y in loop)
    beyond = max(along) + abs(ux) * w / 2 + abs(uy) * h / 2 + 0.02
    side = across + abs(uy) * w / 2 + abs(ux) * h / 2 + 0.02
    middle = 0.6 * max(along)
    return [(state[0] + beyond * ux, state[1] + beyond * uy)] + [
        (state[0] + middle * ux - sign * side * uy, state[1] + middle * uy + sign * side * ux) for sign in (1, -1)
    ]


def _edge_spots(curve: list[Point]) -> list[Point]:
    """Candidate centres for another edge's label: beside the first half of its line, from the source out."""
    return [_beside(curve, j, offset) for j in range(len(curve) // 2 + 1) for offset in LABEL_OFFSETS]


def _label_points(graph: TransitionGraph, curves: dict, positions: list[Point], node_r: float,
                  labelled: Collection[int]) -> list[Point]:
    """Where each edge's label (and hover target) goes.

    Each labelled edge, self-loops first (they have the fewest spots), then the likeliest first,
    takes its first candidate spot that lies inside the plot and overlaps no state and no label
    placed before it (or else the spot that overlaps least): so labels never pile up in the
    middle, and each stays by the state it leaves. Unlabelled edges keep their midpoint."""
    edges = graph.edges
    points = [curves[(e.source, e.target)][CURVE_POINTS // 2] for e in edges]
    w, h = LABEL_SIZE
    placed: dict[int, Point] = {}
    order = sorted(labelled, key=lambda i: (edges[i].source != edges[i].target, -edges[i].probability))
    for _ in range(PLACEMENT_ROUNDS):  # the first places greedily, the next moves labels that still overlap
        for i in order:
            placed.pop(i, None)
            edge, labels = edges[i], list(placed.values())
            curve = curves[(edge.source, edge.target)]
            spots = _loop_spots(curve, positions[edge.source]) if edge.source == edge.target else _edge_spots(curve)
            best, best_clearance = spots[0], -math.inf
            for x, y in spots:
                inside = abs(x) + w / 2 <= AXIS_LIMIT and abs(y) + h / 2 <= AXIS_LIMIT
                clearance = _clearance((x, y), labels, positions, node_r) if inside else -1.0
                if clearance > best_clearance:
                    best, best_clearance = (x, y), clearance
                if clearance >= 1:
                    break
            placed[i] = points[i] = best
    return points


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


def _circle(centre: Point, radius: float, **style) -> dict:
    """A circle shape in data units: it grows and shrinks with the plot, unlike a marker."""
    (x, y), r = centre, radius
    return dict(type="circle", xref="x", yref="y", x0=round(x - r, 3), x1=round(x + r, 3),
                y0=round(y - r, 3), y1=round(y + r, 3), **style)


def _state_shapes(positions: list[Point], unseen: set[int], node_r: float) -> list[dict]:
    """The states as circles; the first of each kind carries the kind's legend entry."""
    shapes, named = [], set()
    for state, centre in enumerate(positions):
        name = UNSEEN if state in unseen else SEEN
        colour = UNSEEN_COLOUR if state in unseen else SEEN_COLOUR
        shapes.append(_circle(
            centre, node_r, layer="below", fillcolor="white" if state in unseen else SEEN_COLOUR,
            line=dict(color=colour, width=3), name=name, legendgroup=name, showlegend=name not in named,
            legendrank=1 + (state in unseen),
        ))
        named.add(name)
    return shapes


def chain_figure(
    graph: TransitionGraph,
    *,
    unseen: Collection[int] = (),
    walk: Sequence[int] | None = None,
    title: str = "",
) -> PlotData:
    """The transition graph; `unseen` states are marked, a `walk` (list of states) is highlighted.

    It is redrawn about five times a second while a baby GPT trains, so it comes as Plotly JSON ready for
    gr.Plot, as the loss chart does: the traces and shapes are plain data, the layout (validated by Plotly,
    with its theme) is built once per number of states. Building a checked `go.Figure` for every frame took
    ~40 ms, most of a busy server's work for a learner watching the chain form."""
    n = len(graph.labels)
    positions = _positions(n)
    node_r = _node_radius(n)
    curves = {
        (e.source, e.target): _edge_curve(positions[e.source], positions[e.target], node_r, e.source < e.target)
        for e in graph.edges
    }
    traces = []

    if walk:
        steps = Counter(zip(walk, walk[1:]))
        xs, ys = _polyline([curves[step] for step in steps])
        traces.append(dict(
            type="scatter", x=xs, y=ys, mode="lines", line=dict(color=WALK_COLOUR, width=12), opacity=WALK_OPACITY,
            hoverinfo="skip", name=f"walk: {len(walk) - 1} steps", legendrank=3,
        ))

    by_bucket: dict[int, list[Edge]] = {}
    for edge in graph.edges:
        by_bucket.setdefault(min(int(edge.probability * BUCKETS), BUCKETS - 1), []).append(edge)
    for bucket, edges in sorted(by_bucket.items()):
        middle = (bucket + 0.5) / BUCKETS
        xs, ys = _polyline([curves[(e.source, e.target)] for e in edges])
        traces.append(dict(
            type="scatter", x=xs, y=ys, mode="lines", line=dict(color=_colour(middle), width=0.5 + 6 * middle),
            hoverinfo="skip", showlegend=False,
        ))

    tips = [curves[(e.source, e.target)] for e in graph.edges]
    hover = [
        f"{graph.labels[e.source]} → {graph.labels[e.target]}<br>next token {graph.token_labels[e.token]}: "
        f"{e.probability:.1%}"
        for e in graph.edges
    ]
    probabilities = [e.probability for e in graph.edges]
    traces.append(dict(  # arrowheads, coloured exactly, with the colour bar in the corner the circle leaves free
        type="scatter", x=[round(c[-1][0], 3) for c in tips], y=[round(c[-1][1], 3) for c in tips], mode="markers",
        marker=dict(
            symbol="arrow", angle=[round(_arrow_angle(c)) for c in tips],
            size=[round(9 + 8 * p, 1) for p in probabilities],
            color=probabilities, colorscale=COLORSCALE, cmin=0, cmax=1, line=dict(width=0),
            colorbar=dict(thickness=10, len=70, lenmode="pixels", x=1, xanchor="right", y=1, yanchor="top",
                          tickvals=[0, 0.5, 1], tickformat=".0%"),
        ),
        hoverinfo="skip", showlegend=False,
    ))
    labelled = _labelled(graph)
    label_points = _label_points(graph, curves, positions, node_r, labelled)
    traces.append(dict(  # invisible targets so every edge has hover text, at its label
        type="scatter", x=[round(x, 3) for x, _ in label_points], y=[round(y, 3) for _, y in label_points],
        mode="markers", marker=dict(size=14, opacity=0), hovertext=hover, hoverinfo="text", showlegend=False,
    ))
    traces.append(dict(  # labels: a trace (not annotations) so that the states draw over them
        type="scatter", x=[round(label_points[i][0], 3) for i in labelled],
        y=[round(label_points[i][1], 3) for i in labelled],
        mode="text", textfont=dict(size=_font_px(n) - 1, color="#1f2937", shadow="0 0 3px white, 0 0 2px white"),
        text=[f"{graph.token_labels[graph.edges[i].token]} ({graph.edges[i].probability:.0%})" for i in labelled],
        hoverinfo="skip", showlegend=False,
    ))

    unseen = set(unseen)
    ends = {walk[0]: "the walk starts here", walk[-1]: "the walk ends here"} if walk else {}
    inside = n <= MAX_NAMES_INSIDE
    names = [(p, "middle center") for p in positions] if inside else [_name_placement(p, node_r) for p in positions]
    traces.append(dict(  # the states' names on (or by) their circles, which are shapes; with hover text
        type="scatter", x=[round(x, 3) for (x, _), _ in names], y=[round(y, 3) for (_, y), _ in names],
        mode="text", text=list(graph.labels), textposition=[side for _, side in names], name="states",
        showlegend=False,
        textfont=dict(size=_font_px(n), color=["white" if inside and s not in unseen else "#1f2937" for s in range(n)]),
        hovertext=[
            " · ".join([f"state {label}", UNSEEN if s in unseen else SEEN] + ([ends[s]] if s in ends else []))
            for s, label in enumerate(graph.labels)
        ],
        hoverinfo="text",
    ))
    shapes = _state_shapes(positions, unseen, node_r)
    if walk:
        shapes += [_circle(positions[s], 1.4 * node_r, layer="above", line=dict(color=WALK_COLOUR, width=3))
                   for s in ends]
    # The title clears the label Gradio draws over the plot's top left corner; the legend (two rows on a
    # phone) goes under it.
    layout = {**_chain_layout(n), "shapes": shapes,
              "title": dict(text=title, x=0.02, y=1, yref="container", yanchor="top", pad=dict(t=44), font=dict(size=14))}
    return plotly_json(json.dumps({"data": traces, "layout": layout}))


@functools.lru_cache(maxsize=64)
def _chain_layout(n: int) -> dict:
    """The graph's layout for `n` states, checked by Plotly and with its theme (read only: callers copy it)."""
    # The graph is a square as wide as the plot allows, at the top: on a narrow (phone) plot the
    # spare height is left below it, not around it. The legend sits above it.
    axis = dict(visible=False, range=[-AXIS_LIMIT, AXIS_LIMIT], fixedrange=False, constrain="domain")
    fig = go.Figure()
    fig.update_layout(
        height=_height(n), margin=dict(l=10, r=10, t=120, b=10),
        plot_bgcolor="white", paper_bgcolor="white",
        xaxis=axis, yaxis=dict(axis, scaleanchor="x", scaleratio=1, constraintoward="top"),
        legend=dict(orientation="h", x=0, xanchor="left", y=1.01, yanchor="bottom"),
        uirevision="baby-chain",  # keep the user's zoom while frames stream in
        hoverlabel=dict(bgcolor="white"),
    )
    return json.loads(fig.to_json())["layout"]


def comparison_figure(analysis: ChainAnalysis, labels: Sequence[str], token_labels: Sequence[str]) -> go.Figure:
    """The model's next-token probabilities and the data's frequencies side by side; the most
    disagreeing states boxed."""
    n = len(labels)
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
        subplot_titles=("The model", "The training data"),  # short: a phone gives each panel ~130 px
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
        title=dict(text=f"Orange boxes: where model and data<br>disagree most ({boxed or 'none'})", x=0.02,
                   font=dict(size=13)),
        plot_bgcolor="#f3f4f6",
    )
    return fig
