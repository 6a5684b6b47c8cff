"""The Baby GPT tab: its figures, its handlers as plain functions, and its API on a running app."""

import itertools
import json
import math

import gradio as gr
import pytest

from support.app import api_client, plotted
from core.babygpt import EXAMPLE_SEQUENCE, BabyConfig, BabyRun, analyse_chain, transition_graph
from playground.context import AppContext
from playground.figures.baby import ARROW_ROOM, AXIS_LIMIT, LABEL_SIZE, chain_figure, comparison_figure
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.tabs import baby as tab

# sequence, V, L, layers, heads, n_embd, steps, learning rate, seed, temperature
DEFAULT_FORM = [EXAMPLE_SEQUENCE, 2, 3, 4, 4, 16, 50, 1e-3, 1337, 1.0]
SMALL_FORM = ["0120120210", 3, 2, 1, 2, 8, 8, 1e-2, 0, 1.0]
FRAME_LIMIT_BYTES = 400_000  # one streamed frame of the largest (81-state) chain


@pytest.fixture
def ctx():
    with gr.Blocks():
        return AppContext(settings=Settings(), registry=SessionRegistry(10**9, 3600.0),
                          model_changed=gr.Textbox(), tabs=gr.Tabs())


@pytest.fixture
def handlers(ctx):
    return tab.BabyHandlers(ctx)


@pytest.fixture
def fast(monkeypatch):
    """No paced replay: a short run's frames come as fast as it trains."""
    monkeypatch.setattr(tab, "MIN_ANIMATION_S", 0.0)


def trained_run(**fields) -> BabyRun:
    run = BabyRun.start(fields.pop("sequence", EXAMPLE_SEQUENCE), BabyConfig(**fields))
    for _ in run.train():
        pass
    return run


def figure_json(fig) -> dict:
    """A figure's Plotly JSON, whether it came as Plotly JSON for gr.Plot (the chain) or as a Figure."""
    return json.loads(fig.plot if hasattr(fig, "plot") else fig.to_json())


def arrowheads(fig) -> list[float]:
    """The probability on each edge's arrowhead, in edge order."""
    (trace,) = [t for t in figure_json(fig)["data"] if t.get("marker", {}).get("symbol") == "arrow"]
    return trace["marker"]["color"]


def named(fig, name: str) -> dict:
    return next(t for t in figure_json(fig)["data"] if t.get("name", "").startswith(name))


def state_kinds(fig) -> dict[str, str]:
    """Each state's name -> the legend group of its circle (a shape): 'in the data' or 'never ...'."""
    names = named(fig, "states")["text"]
    circles = [shape for shape in figure_json(fig)["layout"]["shapes"] if shape.get("legendgroup")]
    return dict(zip(names, (circle["legendgroup"] for circle in circles), strict=True))


def edge_labels(fig) -> dict:
    """The trace of edge labels `token (p%)`."""
    (labels,) = [t for t in figure_json(fig)["data"] if t.get("mode") == "text" and t.get("name") != "states"]
    return labels


def chain_of(V: int, L: int, steps: int = 2, temperature: float = 1.0):
    """(run, graph, analysis) of a briefly trained chain with V tokens and context L."""
    run = trained_run(vocab_size=V, context_length=L, sequence="012" * 5 if V == 3 else "0110101", steps=steps)
    probs = run.snapshots[-1].probs(temperature)
    return run, transition_graph(run.space, probs), analyse_chain(run.space, probs, run.counts)


# ---------------------------------------------------------------- figures

@pytest.mark.parametrize("V, L", [(2, 3), (3, 2), (2, 5), (3, 4)])
def test_chain_figure_draws_every_edge_and_marks_unseen_states(V, L):
    run, graph, analysis = chain_of(V, L)
    fig = chain_figure(graph, unseen=analysis.unseen, title="t")
    assert arrowheads(fig) == pytest.approx([e.probability for e in graph.edges])
    kinds = state_kinds(fig)
    assert sorted(s for s, kind in kinds.items() if kind == "never in the data") == sorted(
        run.space.labels()[s] for s in analysis.unseen)
    assert len(kinds) == V**L
    legend = [shape["name"] for shape in figure_json(fig)["layout"]["shapes"] if shape.get("showlegend")]
    assert sorted(legend) == sorted({*kinds.values()})  # one legend entry per kind of state
    labels = edge_labels(fig)
    if V**L <= 8:  # every edge labelled `token (p%)`
        assert len(labels["text"]) == V**L * V
        first = graph.edges[0]
        assert labels["text"][0] == f"{graph.token_labels[first.token]} ({first.probability:.0%})"
    assert len(fig.plot) < FRAME_LIMIT_BYTES


@pytest.mark.parametrize("V, L, labelled", [
    (2, 3, "every edge"), (3, 2, "likeliest per state"), (2, 4, "likeliest per state"), (3, 3, "confident"),
    (3, 4, "none"),
])
def test_crowded_chains_label_fewer_edges(V, L, labelled):
    _, graph, _ = chain_of(V, L, steps=20, temperature=0.1)  # cold, so the big chains have confident edges
    if labelled in ("confident", "none"):
        assert any(e.probability >= 0.8 for e in graph.edges)
    texts = edge_labels(chain_figure(graph))["text"]
    expected = {
        "every edge": graph.edges,
        "likeliest per state": [max(graph.edges[s * V:(s + 1) * V], key=lambda e: e.probability)
                                for s in range(V**L)],
        "confident": [e for e in graph.edges if e.probability >= 0.8],
        "none": [],
    }[labelled]
    assert sorted(texts) == sorted(f"{graph.token_labels[e.token]} ({e.probability:.0%})" for e in expected)


@pytest.mark.parametrize("V, L, steps", [(2, 3, 0), (2, 3, 50), (3, 2, 20), (2, 4, 20), (4, 1, 5)])
def test_chain_labels_never_pile_up(V, L, steps):
    """Labels are placed apart in data units, so they stay apart at every width: no two of them
    closer than most of a label's size on a phone (the tester saw them piled in the middle)."""
    sequence = {2: EXAMPLE_SEQUENCE, 3: "0120120210", 4: "0123012301"}[V]
    run = trained_run(vocab_size=V, context_length=L, sequence=sequence, steps=max(steps, 1))
    fig = chain_figure(transition_graph(run.space, run.snapshot(steps).probs()))
    points = list(zip(edge_labels(fig)["x"], edge_labels(fig)["y"]))
    width, height = LABEL_SIZE
    for x, y in points:  # none cut off at the plot's edge (a self-loop's label at the top once was)
        assert abs(x) + width / 2 <= AXIS_LIMIT and abs(y) + height / 2 <= AXIS_LIMIT
    for (xa, ya), (xb, yb) in itertools.combinations(points, 2):
        assert max(abs(xa - xb) / width, abs(ya - yb) / height) >= 0.85, ((xa, ya), (xb, yb))


@pytest.mark.parametrize("V, L", [(2, 3), (2, 4), (3, 4)])
def test_chain_geometry_scales_with_the_plot(V, L):
    """States are circles in data units on a square graph, so the figure reads the same on a phone
    as on a desktop: every edge ends just outside its target's circle, never under it."""
    _, graph, _ = chain_of(V, L)
    data = figure_json(chain_figure(graph))
    layout = data["layout"]
    assert layout["yaxis"]["scaleanchor"] == "x" and layout["xaxis"]["constrain"] == "domain"
    circles = [shape for shape in layout["shapes"] if shape.get("legendgroup")]
    assert len(circles) == V**L and all(c["type"] == "circle" and c["xref"] == "x" for c in circles)
    radius = (circles[0]["x1"] - circles[0]["x0"]) / 2
    centres = [((c["x0"] + c["x1"]) / 2, (c["y0"] + c["y1"]) / 2) for c in circles]
    (arrows,) = [t for t in data["data"] if t.get("marker", {}).get("symbol") == "arrow"]
    for edge, x, y in zip(graph.edges, arrows["x"], arrows["y"]):
        distance = math.dist((x, y), centres[edge.target])
        if edge.source != edge.target:
            # (the edges between close neighbours of a crowded ring keep 40% of their length, still outside)
            gap = min(radius + ARROW_ROOM, 0.4 * math.dist(centres[edge.source], centres[edge.target]))
            assert radius < distance == pytest.approx(gap, abs=0.005)
    # nothing beside the graph, where a phone has no room: the legend is a row, the colour bar
    # sits inside the plot, in the corner the circle leaves free
    assert layout["legend"]["orientation"] == "h"
    colorbar = arrows["marker"]["colorbar"]
    assert colorbar["x"] == 1 and colorbar["xanchor"] == "right" and colorbar["lenmode"] == "pixels"


def test_bigger_chains_get_taller_figures():
    heights = [figure_json(chain_figure(chain_of(V, L)[1]))["layout"]["height"] for V, L in [(2, 2), (2, 4), (2, 5), (3, 4)]]
    assert heights == sorted(heights) and heights[0] < heights[-1]


def test_chain_figure_highlights_a_walk():
    run = trained_run(steps=1)
    graph = transition_graph(run.space, run.snapshots[-1].probs())
    fig = chain_figure(graph, walk=[7, 7, 6, 5, 3])
    assert named(fig, "walk: 4 steps")["line"]["width"] > 6
    hover = named(fig, "states")["hovertext"]
    assert "the walk starts here" in hover[7] and "the walk ends here" in hover[3]
    rings = [shape for shape in figure_json(fig)["layout"]["shapes"] if not shape.get("legendgroup")]
    assert len(rings) == 2  # around the walk's first and last states


def test_chain_title_shows_the_temperature_when_it_is_not_1():
    snapshot = trained_run(steps=3).snapshot(3)
    assert tab.chain_title(snapshot, 3, 1.0) == f"Step 3 / 3 · loss {snapshot.loss:.3f}"
    assert tab.chain_title(snapshot, 3, 0.3) == f"Step 3 / 3 · loss {snapshot.loss:.3f} · temperature 0.3"


def test_comparison_boxes_the_states_that_disagree_most():
    run = trained_run()
    analysis = analyse_chain(run.space, run.snapshots[-1].probs(), run.counts)
    fig = comparison_figure(analysis, run.space.labels(), ["0", "1"])
    data = figure_json(fig)
    model, frequencies = data["data"]
    assert model["z"][5] == pytest.approx(analysis.probs[5].tolist())
    assert frequencies["z"][0] == [None, None] and frequencies["text"][0] == ["unseen", "unseen"]
    assert frequencies["z"][5] == [0.0, 1.0]
    boxed = sorted({round(shape["y0"] + 0.5) for shape in data["layout"]["shapes"]})
    assert boxed == sorted(analysis.most_disagreeing) and len(data["layout"]["shapes"]) == 2 * len(boxed)


# ---------------------------------------------------------------- handlers


def test_train_animates_then_shows_everything(handlers, ctx):
    frames = list(handlers.train(*DEFAULT_FORM, request="alice"))
    # paced: a 50-step run that trains in a blink still plays for MIN_ANIMATION_S at ~5 frames a second
    assert len(frames) >= 6
    steps = [frame[2]["value"] for frame in frames]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 50
    chain, status, slider, loss, comparison, table, analysis, walk_text = frames[-1]
    assert status.startswith("Trained 50 steps") and slider["maximum"] == 50
    session = ctx.registry.get("alice")
    run = session.baby.run
    assert len(run.snapshots) == 51 and session.job_name is None
    assert arrowheads(chain) == pytest.approx(run.snapshots[-1].probs().flatten().tolist())
    assert "011 → 111 → 110 → 101 → 011" in analysis
    assert "000, 001, 010, 100" in analysis
    assert list(table["state"]) == run.space.labels()
    assert table.loc[5, "model p(1) %"] == pytest.approx(100 * run.snapshots[-1].probs()[5, 1].item(), abs=0.05)
    assert math.isnan(table.loc[0, "data p(1) %"]) and table.loc[0, "note"] == "never in the data"
    assert len(plotted(loss).data[0].x) == 51 and walk_text == ""


def test_frames_while_training_only_update_the_live_outputs(handlers, fast):
    frames = list(handlers.train(*DEFAULT_FORM[:6], 300, *DEFAULT_FORM[7:], request="bob"))
    assert frames[-1][2]["value"] == 300
    for frame in frames[:-1]:
        assert frame[1].startswith("Training... step")
        assert all(output == gr.skip() for output in frame[4:7])


def test_scrub_and_temperature_redraw_from_snapshots(handlers, ctx, fast):
    list(handlers.train(*SMALL_FORM, request="carol"))
    run = ctx.registry.get("carol").baby.run
    chain, status, slider, *_ = handlers.scrub(3, 1.0, "carol")
    assert slider["value"] == 3 and "step 3 of 8" in status
    assert arrowheads(chain) == pytest.approx(run.snapshot(3).probs().flatten().tolist())
    cold = handlers.temperature(8, 0.2, "carol")[0]
    assert arrowheads(cold) == pytest.approx(run.snapshot(8).probs(0.2).flatten().tolist())
    assert max(arrowheads(cold)) > max(arrowheads(chain))
    assert figure_json(chain)["layout"]["title"]["text"] == f"Step 3 / 8 · loss {run.snapshot(3).loss:.3f}"
    assert figure_json(cold)["layout"]["title"]["text"].endswith(" · temperature 0.2")
    walked = handlers.walk("", 5, 0, 8, 2.5, "carol")[0]
    assert figure_json(walked)["layout"]["title"]["text"].endswith(" · temperature 2.5")


def test_walk_is_seeded_drawn_and_cleared_by_scrubbing(handlers, ctx, fast):
    list(handlers.train(*DEFAULT_FORM, request="dave"))
    chain, text = handlers.walk("111", 20, 7, 50, 1.0, "dave")
    state = ctx.registry.get("dave").baby
    assert len(state.walk) == 21 and state.walk[0] == 7
    assert "from 111 (seed 7)" in text and named(chain, "walk: 20 steps")
    assert handlers.walk("111", 20, 7, 50, 1.0, "dave")[1] == text  # same seed, same walk
    # empty start: the state the chain visits most
    handlers.walk("", 5, 0, 50, 1.0, "dave")
    assert state.walk[0] == 7
    walk_text = handlers.scrub(10, 1.0, "dave")[-1]
    assert state.walk is None and walk_text == ""


@pytest.mark.parametrize("start, message", [("2", "not in this model's vocabulary"), ("10", "3 symbols"),
                                            ("1111111111111111111", "the limit is 16")])
def test_walk_rejects_bad_start_states(handlers, start, message):
    with pytest.raises(gr.Error, match=message):
        handlers.walk(start, 5, 0, 0, 1.0, "erin")


def test_before_training_the_untrained_default_model_is_shown(handlers, ctx):
    chain, status, slider, *_ = handlers.scrub(30, 1.0, "frank")
    assert slider["value"] == 0 and "Step 0 / 50" in figure_json(chain)["layout"]["title"]["text"]
    assert arrowheads(chain) == pytest.approx(handlers.preview.snapshots[0].probs().flatten().tolist())
    assert handlers.walk("000", 3, 0, 0, 1.0, "frank")[1].startswith("**Walk** of 3 steps")
    # the untrained run is shared by all sessions, each walk is not
    assert ctx.registry.get("frank").baby.walk is not None
    assert handlers.walk("111", 2, 0, 0, 1.0, "gus")[1].startswith("**Walk** of 2 steps from 111")
    assert ctx.registry.get("frank").baby.walk[0] == 0


@pytest.mark.parametrize("index, value, message", [
    (0, "10213", "only use 0, 1, 2; found '3' at position 5"),
    (0, "10", "needs at least 3"),
    (0, "", "Sequence is empty"),
    (0, "01" * 300, "the limit is 500"),
    (1, 5, "Vocabulary size V must be at most 4"),
    (2, 6, "Context length L must be at most 5"),
    (5, 9, "n_embd \\(9\\) must be divisible by n_head \\(2\\)"),
    (3, 7, "Layers must be at most 6"),
    (6, 1001, "Steps must be at most 1000"),
    (7, math.nan, "Learning rate must be a finite number"),
    (8, 1.5, "Seed must be a whole number"),
    (9, 0, "Temperature must be at least 0.05"),
])
def test_bad_input_is_a_clear_error_and_keeps_the_trained_baby(handlers, ctx, fast, index, value, message):
    list(handlers.train(*SMALL_FORM, request="gina"))
    before = ctx.registry.get("gina").baby
    form = list(SMALL_FORM)
    form[index] = value
    with pytest.raises(gr.Error, match=message):
        list(handlers.train(*form, request="gina"))
    assert ctx.registry.get("gina").baby is before


def test_too_many_states_is_refused_with_the_count(handlers):
    form = list(SMALL_FORM)
    form[1], form[2], form[0] = 4, 4, "0123" * 4
    with pytest.raises(gr.Error, match="256 states; at most 81"):
        list(handlers.train(*form, request="hal"))


def test_one_training_per_session(handlers, ctx):
    with ctx.registry.job("ivy", "baby training"):
        with pytest.raises(gr.Error, match="already running baby training"):
            list(handlers.train(*SMALL_FORM, request="ivy"))


# ---------------------------------------------------------------- the API on a running app


@pytest.mark.integration
def test_api_trains_scrubs_and_walks(running_app):

    demo, url = running_app
    client = api_client(url)
    chain, status, slider, loss, comparison, table, analysis, walk_text = client.predict(
        *DEFAULT_FORM, api_name="/baby_gpt_train")
    assert status.startswith("Trained 50 steps") and "011 → 111 → 110 → 101 → 011" in analysis
    run = demo.registry.peek(client.session_hash).baby.run
    assert len(run.snapshots) == 51
    scrubbed = client.predict(0, 1.0, api_name="/baby_gpt_scrub")
    assert "step 0 of 50" in scrubbed[1]
    hot = client.predict(50, 3.0, api_name="/baby_gpt_temperature")
    assert "temperature 3" in hot[1]
    chain, text = client.predict("101", 10, 1, 50, 1.0, api_name="/baby_gpt_walk")
    assert text.startswith("**Walk** of 10 steps from 101")


@pytest.mark.integration
@pytest.mark.parametrize("api_name, body, message", [
    ("baby_gpt_train", '["111101111011110", 2, 3, 4, 4, 16, 50, NaN, 1337, 1.0]', "Learning rate must be a finite"),
    ("baby_gpt_temperature", "[0, NaN]", "Temperature must be a finite"),
    ("baby_gpt_temperature", "[0, Infinity]", "Temperature must be a finite"),
    ("baby_gpt_walk", '["111", 5, 0, 0, NaN]', "Temperature must be a finite"),
])
def test_nan_and_infinity_sent_as_raw_json_are_refused(running_app, api_name, body, message):
    import httpx

    url = running_app[1]
    event = httpx.post(f"{url}gradio_api/call/{api_name}", content='{"data": ' + body + "}",
                       headers={"content-type": "application/json"}, timeout=30).json()["event_id"]
    answer = httpx.get(f"{url}gradio_api/call/{api_name}/{event}", timeout=60).text
    assert "event: error" in answer and message in answer, answer
