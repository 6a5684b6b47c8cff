"""Issue 14 on the Train tab: the break-it switches, the attention movie recorded while training, its
replay and /attention_movie, and each head's scores over training."""

import json
import re

import gradio as gr
import pytest
import torch

from core.attention import STRONG_PATTERN
from core.movie import INDUCTION, SCORED, AttentionMovie, induction_onset
from playground.tabs.attention import AttentionHandlers
from playground.tabs.generate import GenerateHandlers
from playground.tabs.train import replay as train_tab
from playground.tabs.train import run as train_run
from playground.tabs.train.form import BREAK_IT, TrainForm
from support.app import FORM, plotted
from support.handlers import run_train
from support.movies import PROBE, uniform, with_induction_head


# ---------------------------------------------------------------- break-it switches


def test_a_run_without_the_mask_trains_and_the_settings_name_the_change(train, ctx):
    updates = run_train(train, causal=False)
    assert updates[-1][0].startswith("Done: 20 steps")
    config = ctx.registry.get("a").model.config
    assert (config.causal, config.scale_attention, config.use_position_embedding) == (False, True, True)
    _, next_step = train.run.preview(**{**FORM, "steps": 40}, request="a")  # the form now has the mask back on
    assert "Causal mask off → on" in next_step and "New model" in next_step
    status = run_train(train, steps=40)[-1][0]  # Train does not continue a different model
    assert "Causal mask off → on" in status and ctx.registry.get("a").trained.step == 20
    assert list(train.run.train_new(**{**FORM, "steps": 5}, request="a"))[-1][0].startswith("Done: 5 steps")
    assert ctx.registry.get("a").model.config.causal is True


@pytest.mark.parametrize("bad", ["false", "False", "", None, 2, 0.5, [], float("nan")])
def test_the_switches_take_only_true_or_false(train, bad):
    for name, (label, _) in BREAK_IT.items():
        with pytest.raises(gr.Error, match=label.replace("√", ".")):
            train.rules.recipe(TrainForm(**{**FORM, name: bad}))


def test_a_switch_turns_a_part_off_on_top_of_the_stage_and_never_on(train):
    def config(**changes):
        return train.rules.recipe(TrainForm(**{**FORM, **changes})).configs(28)[0]

    assert config(use_position_embedding=False).use_position_embedding is False
    assert config(scale_attention=False).scale_attention is False
    assert config(stage="bigram", use_position_embedding=True).use_position_embedding is False  # the stage's


def test_presets_show_every_switch_on(train):
    for preset in ("repeat", "shakespeare-char"):
        form = train.rules.apply_preset(preset)
        assert all(form[name] is True for name in BREAK_IT)


def test_a_loaded_checkpoint_sets_the_switches(train, ctx):
    run_train(train, "x", scale_attention=False, steps=5)
    shown = train.checkpoints.load_checkpoint(train.checkpoints.save_checkpoint("x"), "y")
    assert (shown["causal"], shown["scale_attention"], shown["use_position_embedding"]) == (True, False, True)
    form = {**FORM, **{k: shown[k] for k in ("stage", *BREAK_IT)}, "steps": 10}
    assert "continues your model" in train.run.preview(**form, request="y")[1]  # the form describes the upload


# ---------------------------------------------------------------- the attention movie


def test_a_run_records_its_attention_and_replays_any_frame(train, ctx):
    updates = run_train(train, steps=30)
    movie = ctx.registry.get("a").trained.movie
    steps = [frame.step for frame in movie.frames]
    assert len(steps) >= 5 and steps == sorted(set(steps)) and steps[-1] == 30  # the last step has its frame
    note, scores = updates[-1][6], updates[-1][7]
    assert f"{len(steps)} snapshots of steps {steps[0]}–30 (at most one every step;" in note and "of at most 2 MiB" in note
    # the strongest heads of each pattern and of the induction verdict's scores: both heads here
    assert len(plotted(scores).data) == 2 * len(movie.curves()) == 2 * (len(SCORED) + 1)
    probed = movie.induction_curve()[0]  # the first snapshot, every 4th after it and the last
    assert probed[0] == 1 and probed[-1] == 30 and len(probed) < len(steps)
    assert not movie.induction_curve()[1].any()  # one layer: no head past layer 0 to be one
    assert "No induction head at step 30: no head past layer 0" in note
    last = movie.frames[-1].scores  # a pattern is named by its strongest head only where one scores enough
    shows = re.search(r"No head[^.]* shows a ([^.(]*) pattern", note)
    for pattern in SCORED:
        strong = float(last[pattern].max()) >= STRONG_PATTERN
        assert (f"{pattern} L" in note) == strong and (shows is not None and pattern in shows.group(1)) != strong
    figure = plotted(train.replay.replay(steps[2] + 0.5, "a"))  # between two snapshots: the one before
    assert f"at step {steps[2]}" in figure.layout.title.text and figure.data
    assert train.replay.movie_after_run("a") == {"maximum": 30, "value": 30, "__type__": "update"}


def test_train_continues_the_movie_and_a_new_model_starts_one(train, ctx):
    run_train(train, steps=10)
    movie = ctx.registry.get("a").trained.movie
    run_train(train, steps=20)
    assert ctx.registry.get("a").trained.movie is movie and movie.frames[-1].step == 20
    assert [f.step for f in movie.frames][0] == 1
    list(train.run.train_new(**{**FORM, "steps": 5}, request="a"))
    fresh = ctx.registry.get("a").trained.movie
    assert fresh is not movie and fresh.frames[0].step == 1 and fresh.frames[-1].step == 5


def test_the_attention_movie_endpoint_round_trips(train, ctx):
    run_train(train, steps=15)
    movie = ctx.registry.get("a").trained.movie
    answer = json.loads(json.dumps(train.replay.attention_movie("a")))  # plain JSON
    assert answer["steps"] == [frame.step for frame in movie.frames] and answer["recorded"] == len(movie.frames)
    assert len(answer["probe_tokens"]) == len(movie.probe_ids) and answer["max_bytes"] == movie.max_bytes
    last, frame = answer["frames"][-1], movie.frames[-1]
    assert torch.allclose(torch.tensor(last["maps"]), frame.maps.float(), atol=6e-4)
    assert set(last["scores"]) == {*SCORED, INDUCTION}  # the last snapshot is always probed
    assert torch.tensor(last["scores"][INDUCTION]).shape == frame.probe.shape
    assert all(len(str(v)) <= 5 for v in last["maps"][0][0][-1])  # rounded to 3 decimals: "0.123"


def test_no_movie_is_a_clear_error(train, ctx):
    with pytest.raises(gr.Error, match="no attention movie yet"):
        train.replay.attention_movie("nobody")
    run_train(train, "b", stage="bigram", steps=3)  # no attention to record
    assert ctx.registry.get("b").trained.movie is None
    with pytest.raises(gr.Error, match="no attention movie yet"):
        train.replay.attention_movie("b")
    # the slider moves after any run: without a movie the replay says what to do, it raises nothing
    assert train_tab.NO_REPLAY in plotted(train.replay.replay(0, "b")).layout.annotations[0].text.replace("<br>", " ")
    assert train.replay.movie_after_run("b") == {"maximum": 1, "value": 0, "__type__": "update"}
    _, playing, timer, label = train.replay.advance(0, "b")  # a tick without a movie pauses the replay
    assert (playing, timer.active, label) == (False, False, train_tab.PLAY)
    with pytest.raises(gr.Error, match="Replay step"):
        train.replay.replay("abc", "b")


def test_a_long_run_stays_under_the_movie_memory_cap(train, ctx, monkeypatch):
    frame_bytes = 1 * 2 * 16 * 16 * 2  # one layer, two heads, a 16-token probe, float16
    monkeypatch.setattr(train_tab, "MOVIE_BYTES", 12 * frame_bytes)
    monkeypatch.setattr(train_tab, "MOVIE_FRAMES", 400)  # a snapshot every step, so memory fills,
    # whatever the snapshots cost against the steps (on a loaded machine the view budget skipped most of them)
    monkeypatch.setattr(train_run, "VIEW_BUDGET", float("inf"))
    run_train(train, steps=300)
    movie = ctx.registry.get("a").trained.movie
    steps = [frame.step for frame in movie.frames]
    assert movie.nbytes <= movie.max_bytes == 12 * frame_bytes and movie.every > 1
    assert steps[0] == 1 and steps[-1] == 300 and steps == sorted(steps)
    answer = train.replay.attention_movie("a")
    assert len(json.dumps(answer["frames"])) <= movie.max_bytes  # the endpoint keeps to the same cap
    assert answer["steps"][0] == 1 and answer["steps"][-1] == 300


# ---------------------------------------------------------------- head scores over training


def probe_scores(score: float) -> torch.Tensor:
    """(L, H) induction scores on random tokens written twice: `score` at layer 1, head 2, 0.1 elsewhere."""
    scores = torch.full((2, 3), 0.1)
    scores[1, 2] = score
    return scores


def test_the_head_scores_mark_when_an_induction_head_forms():
    movie = AttentionMovie(PROBE)
    for step in range(10, 110, 10):
        formed = step >= 60
        movie.add(step, with_induction_head() if formed else uniform(), probe_scores(0.9 if formed else 0.2))
    assert induction_onset(movie) == 60
    figure = json.loads(train_tab.scores_plot(movie).plot)
    layout = figure["layout"]
    assert [shape["x0"] for shape in layout["shapes"]] == [60] * 3  # through every panel
    assert any(a["text"] == "induction head forms (step 60)" for a in layout["annotations"])
    induction = [trace for trace in figure["data"] if trace["xaxis"] == "x3"]
    assert max(max(trace["y"]) for trace in induction) == pytest.approx(0.9)  # the head that formed is drawn
    note = train_tab.movie_note(movie, False)
    assert ("Induction heads at step 100, by the probe (random tokens written twice): L1 H2 (0.90); one formed at "
            "step 60.") in note


def test_no_marker_without_an_induction_head():
    movie = AttentionMovie(PROBE)
    for step in (1, 2, 3):  # the probe text's repeats followed, by a head that fails the probe
        movie.add(step, with_induction_head(), probe_scores(0.2))
    layout = json.loads(train_tab.scores_plot(movie).plot)["layout"]
    assert "shapes" not in layout and not any("induction head forms" in a["text"] for a in layout["annotations"])
    note = train_tab.movie_note(movie, False)
    assert "No induction head at step 3: no head past layer 0 follows the repeats" in note and "induction L" not in note


def test_play_steps_through_the_snapshots_and_pauses_at_the_end(train, ctx):
    run_train(train, steps=6)
    steps = [frame.step for frame in ctx.registry.get("a").trained.movie.frames]
    playing, timer, label, start = train.replay.play(False, steps[-1], "a")  # at the end: plays from the start
    assert (playing, timer.active, label, start) == (True, True, train_tab.PAUSE, 0)
    shown, step = [], 0
    while True:
        step, *rest = train.replay.advance(step, "a")
        if rest[0] is False:  # paused after the last snapshot
            assert rest[1].active is False and rest[2] == train_tab.PLAY
            break
        shown.append(step)
    assert shown == steps
    assert train.replay.play(True, 3, "a")[:3:2] == (False, train_tab.PLAY)  # Pause
    with pytest.raises(gr.Error, match="no attention movie yet"):
        train.replay.play(False, 0, "nobody")


def test_a_shared_link_carries_a_switch(train):
    from urllib.parse import parse_qsl, urlsplit

    from playground.tabs.train import link as share

    values = {**share.preset_values(train.rules, "repeat"), "causal": False}
    address = share.link("http://host/", values, share.View(), train.rules)
    assert ("causal", "0") in parse_qsl(urlsplit(address).query)  # only the switch that differs is written
    setup = share.parse(parse_qsl(urlsplit(address).query), train.rules)
    assert setup.ignored == () and "causal" in setup.applied
    assert train.rules.recipe(TrainForm(**setup.values)).model["causal"] is False
    assert "causal=false" not in address and share.parse([("causal", "false")], train.rules).ignored  # refused, named


def test_the_movie_downloads_as_a_gif_and_a_loaded_checkpoint_clears_the_replay(train, ctx):
    from PIL import Image

    with pytest.raises(gr.Error, match="no attention movie yet"):
        train.replay.movie_gif("a")
    run_train(train, steps=30)
    frames = ctx.registry.get("a").trained.movie.frames
    path = train.replay.movie_gif("a")
    assert path.endswith("attention-movie-step30.gif") and ctx.registry.get("a").id in path  # the server's id
    with Image.open(path) as gif:
        assert gif.n_frames == len(frames)
    shown = train.checkpoints.load_checkpoint(train.checkpoints.save_checkpoint("a"), "a")
    assert shown["movie_note"] == train_tab.NO_MOVIE  # not the old model's movie any more
    assert train_tab.NO_REPLAY in plotted(shown["movie_plot"]).layout.annotations[0].text.replace("<br>", " ")
    assert train_tab.NO_SCORES in plotted(shown["head_scores"]).layout.annotations[0].text.replace("<br>", " ")


# ---------------------------------------------------------------- the notes that describe the model

BUILT_WITHOUT = {"causal": "the causal mask", "scale_attention": "the √d scaling", "use_position_embedding": "the positions"}


@pytest.mark.parametrize("switch", [None, *BREAK_IT])
def test_every_note_that_describes_the_model_matches_how_it_was_built(train, ctx, switch):
    """Issue 30: with a break-it switch off, the progress line, Generate's model line and the step-by-step note
    each describe the model as it was built (mask, scaling, positions); with every switch on, the full model."""
    updates = run_train(train, steps=5, **({switch: False} if switch else {}))
    progress, info = updates[-1][1], GenerateHandlers(ctx).model_info("a")
    attention = AttentionHandlers(ctx)
    attention.analysis.analyse("mynbiqpm|mynbiqpm", "a")
    note, table, _ = attention.steps.head_steps(0, 1, 4, True, True, "a")  # query #4 of 17 tokens: later ones exist
    headers, steps = list(table.data[0].x), attention.ctx.registry.get("a").attention.results["steps"]
    if switch is None:
        assert "Built without" not in progress and "built without" not in info
    else:
        assert f"Built without {BUILT_WITHOUT[switch]}." in progress and f"built without {BUILT_WITHOUT[switch]};" in info
    masked = switch != "causal"
    assert ("keys after the query get -∞ (the mask)" in note) == masked and ("+ mask" in headers) == masked
    assert ("nothing hides the keys after the query" in note) != masked
    assert ("**Without the mask** is how this model already works" in note) != masked
    assert (steps.weights[5:].sum() == 0) == masked  # the table's softmax: nothing on later tokens, or some
    assert (f"too, {steps.weights[5:].sum().item():.3f} of its weight is on them" in note) != masked
    # "100% right" beside a garbage sample: the progress line and Generate say why
    assert ("score copying, not predicting" in progress) != masked and ("expect garbage" in info) != masked
    scaled = switch != "scale_attention"
    assert ("divided by √d = " in note) == scaled and ("÷√8" in headers) == scaled
    assert ("**not** divided by √d" in note) != scaled
    assert ("**Without ÷√d** is how this model already works" in note) != scaled
    positioned = switch != "use_position_embedding"
    assert ("**Positions:** each token's vector had its position's learned embedding" in note) == positioned
    assert ("**No positions**" in note) != positioned


def test_the_last_step_is_probed_even_where_its_snapshot_came_before_the_run_ended():
    """A snapshot taken at the final step before the 'done' event, between probes: the done event records it
    again with the probe, so the replay's verdict is of the final model."""
    from types import SimpleNamespace
    movie = AttentionMovie(PROBE)
    movie.add(1, uniform(), probe_scores(0.2))
    movie.add(5, uniform())  # not a 4th snapshot: no probe
    assert train_tab.snapshot_due(movie, SimpleNamespace(step=5, done=True), affordable=False)
    assert not train_tab.snapshot_due(movie, SimpleNamespace(step=5, done=False), affordable=True)
    movie.add(5, with_induction_head(), probe_scores(0.9))  # takes the unprobed snapshot's place
    assert [(f.step, f.probe is not None) for f in movie.frames] == [(1, True), (5, True)]
    assert not train_tab.snapshot_due(movie, SimpleNamespace(step=5, done=True), affordable=True)
    assert induction_onset(movie) == 5
