"""The Ladder tab's handlers called as plain functions (a session id stands in for gr.Request): a whole
climb, Stop, hostile inputs, two sessions side by side, and the tab's wiring in the app."""

import math
import re
import time

import gradio as gr
import pytest

from support.app import plotted
from core.ladder import RUNGS
from core.data import DataError
from playground.app import TABS, build_app
from playground.context import AppContext
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.tabs import ladder as tab

STEPS = 100  # the slider's minimum: about 8 s for every rung on one core
LOSS = re.compile(r"^(\d+\.\d{3})( \(stopped at step ([\d,]+)\))?$")


def make_handlers(**settings) -> tab.LadderHandlers:
    return tab.LadderHandlers(AppContext(settings=Settings(**settings), registry=SessionRegistry(10**9, 600),
                                         model_changed=None, tabs=None))


@pytest.fixture
def handlers():
    return make_handlers()


@pytest.fixture
def every_step(monkeypatch):
    """An update for every step, so a test can stop the climb exactly where it wants on any machine."""
    monkeypatch.setattr(tab, "UI_INTERVAL_S", 0.0)


@pytest.fixture
def quick_estimates(monkeypatch):
    """Each validation estimate on 2 batches, not the tab's EVAL_ITERS: for a test of who climbs
    and who stops, not the loss's precision (50-batch estimates are most of a 100-step climb's time)."""
    monkeypatch.setattr(tab, "EVAL_ITERS", 2)


def losses(table) -> list[float | None]:
    """The validation loss of each row, None where the rung has none (pending, training, not reached)."""
    found = [LOSS.match(cell) for cell in table["val loss"]]
    return [float(match.group(1)) if match else None for match in found]


def curves(plot) -> list[str]:
    """The names of the plot's rung curves (the lecture's dotted lines have no legend entry of their own)."""
    return [trace.name for trace in plotted(plot).data if trace.showlegend is not False]


def climb_until(stream, rung: int, step: int) -> tuple:
    """Pull updates until the status shows rung `rung` (1-based) training at `step`."""
    for update in stream:
        if update[0].startswith(f"Rung {rung} of {len(RUNGS)}: ") and f", step {step} / {STEPS}," in update[0]:
            assert update[2]["val loss"][rung - 1] == tab.TRAINING
            return update
    raise AssertionError(f"the climb never showed rung {rung} at step {step}")


def test_before_a_climb_every_rung_is_pending_beside_the_lecture(handlers):
    status, plot, table = handlers.initial()
    assert "Climb the ladder" in status
    assert list(table["rung"]) == [f"{i}. {stage.title}" for i, stage in enumerate(RUNGS.values(), 1)]
    assert list(table["val loss"]) == [tab.PENDING] * len(RUNGS)
    assert list(table["lecture"]) == ["" if s.lecture_loss is None else f"{s.lecture_loss:.2f}"
                                            for s in RUNGS.values()]
    assert plotted(plot).data == ()
    assert plotted(plot).layout.annotations[0].text.startswith("Press Climb the ladder")


def test_a_climb_fills_every_row_and_overlays_every_curve(handlers):
    started = time.monotonic()
    updates = list(handlers.climb(STEPS, 1337, "a"))
    seconds = time.monotonic() - started
    status, plot, table = updates[-1]
    assert status.startswith(f"Climbed all {len(RUNGS)} rungs ({STEPS} steps each)")
    found = losses(table)
    assert all(loss is not None and math.isfinite(loss) for loss in found), table
    assert found[-1] < found[0] - 0.3  # the GPT is far below the bigram even after 100 steps
    params = [int(count.replace(",", "")) for count in table["params"]]
    assert params[0] < params[2] < params[4] < params[5]  # the model grows as ideas are added
    assert abs(params[6] - params[5]) < 0.05 * params[5]  # today's parts at the same size
    changes = [float(change) for change in table["change"][1:]]
    assert changes == pytest.approx([b - a for a, b in zip(found, found[1:])], abs=2e-3)
    assert all(float(seconds) > 0 for seconds in table["time (s)"])
    assert curves(plot) == list(table["rung"])  # one curve per rung, with the rung's title in the legend
    dotted = [trace for trace in plotted(plot).data if trace.showlegend is False]
    assert [trace.y[0] for trace in dotted] == [s.lecture_loss for s in RUNGS.values() if s.lecture_loss]
    ladder = handlers.ctx.registry.get("a").ladder
    assert [rung.stage for rung in ladder.rungs] == list(RUNGS) and ladder.eval_iters == tab.EVAL_ITERS

    # while it climbed: where it stood, the rungs to come pending, the curves so far; throttled
    during = [update for update in updates if update[0].startswith("Rung ")]
    last = len(RUNGS)
    assert any(re.fullmatch(rf"Rung {last} of {last}: \*\*.+\*\*, step \d+ / 100, about \d+ s left on this rung\.", s)
               for s, _, _ in during), [s for s, _, _ in during]
    assert any(tab.TRAINING in list(t["val loss"]) for _, _, t in during)
    assert any(list(t["val loss"])[-1] == tab.PENDING and len(curves(p)) < len(RUNGS) for _, p, t in during)
    # at most one update per interval, plus one at each rung's end, the loading note and the final state
    assert len(updates) <= seconds / tab.UI_INTERVAL_S + len(RUNGS) + 2, (len(updates), seconds)


def test_stop_keeps_the_finished_rungs_and_stops_within_a_step(handlers, every_step, monkeypatch):
    monkeypatch.setattr(tab, "STOP_WAIT_S", 0.1)  # the stream below is not pulled while Stop waits
    stream = handlers.climb(STEPS, 1337, "a")
    climb_until(stream, 3, 40)
    assert handlers.stop("a").startswith("Stopping after this step")
    status, plot, table = list(stream)[-1]
    assert status.startswith("Stopped on rung 3 (+ one self-attention head) at step 40 of 100")
    assert "the table keeps the 2 finished rungs" in status
    assert table["val loss"][2].endswith("(stopped at step 40)") and table["change"][2] == ""  # no like for like
    assert None not in losses(table)[:3] and list(table["val loss"][3:]) == [tab.NOT_REACHED] * (len(RUNGS) - 3)
    assert len(curves(plot)) == 3
    ladder = handlers.ctx.registry.get("a").ladder
    assert [rung.stopped for rung in ladder.rungs] == [False, False, True] and ladder.rungs[2].steps == 40
    assert handlers.stop("a") == gr.skip()  # nothing climbs now: the status stays as it is


@pytest.mark.parametrize("steps, seed, message", [
    ("abc", 1, "Steps per rung must be a number"), (None, 1, "Steps per rung must be a number"),
    ([], 1, "Steps per rung must be a number"), (True, 1, "Steps per rung must be a number"),
    (math.nan, 1, "Steps per rung must be a finite number"), (1e9, 1, "Steps per rung must be at most 5000"),
    (-5, 1, "Steps per rung must be at least 100"), (150.5, 1, "Steps per rung must be a whole number"),
    (STEPS, -1, "Seed must be at least 0"), (STEPS, 2**40, "Seed must be at most"),
    (STEPS, "x", "Seed must be a number"), (STEPS, math.inf, "Seed must be a finite number"),
])
def test_hostile_inputs_are_refused_before_anything_climbs(handlers, steps, seed, message):
    with pytest.raises(gr.Error, match=re.escape(message)):
        next(handlers.climb(steps, seed, "h"))
    assert handlers.ctx.registry.peek("h") is None  # not even a session was made


def test_the_steps_cap_names_how_to_lift_it_only_when_the_server_sets_it():
    with pytest.raises(gr.Error, match="at most 2000.*--no-caps"):
        next(make_handlers(max_iters=2000).climb(3000, 1, "h"))
    with pytest.raises(gr.Error) as refused:
        next(make_handlers(max_iters=1_000_000).climb(20_000, 1, "h"))
    assert refused.value.message == "Steps per rung must be at most 10000, got 20000."  # the tab's limit: not lifted


def test_offline_without_shakespeare_says_so_and_keeps_the_view(handlers, monkeypatch):
    def offline():
        raise DataError("Could not download Tiny Shakespeare (no network). Put it at FOLDER/...")

    monkeypatch.setattr(tab, "_shakespeare", None)
    monkeypatch.setattr(tab, "load_shakespeare", offline)
    stream = handlers.climb(STEPS, 1, "a")
    assert next(stream)[0].startswith("Loading Tiny Shakespeare")
    status, plot, table = next(stream)  # a status that stays, not an error that blanks the chart and table
    assert "this server has no copy" in status and "Could not download Tiny Shakespeare" in status
    assert plot == table == gr.skip()  # both untouched: not a blank chart, not any other update
    assert next(stream, None) is None
    assert not handlers.ctx.registry.get("a").busy  # the session can climb once the file is there


def test_two_sessions_climb_independently(handlers, every_step, quick_estimates):
    a, b = handlers.climb(STEPS, 1337, "a"), handlers.climb(STEPS, 1337, "b")
    climb_until(a, 2, 10)
    climb_until(b, 2, 10)
    with pytest.raises(gr.Error, match="already running the ladder"):
        next(handlers.climb(STEPS, 1, "a"))  # one climb per session at a time
    handlers.stop("a")
    *_, (status_b, plot_b, table_b) = b
    *_, (status_a, _, table_a) = a
    assert status_a.startswith("Stopped on rung 2") and status_b.startswith(f"Climbed all {len(RUNGS)} rungs")
    assert None not in losses(table_b) and len(curves(plot_b)) == len(RUNGS)
    ladder_a, ladder_b = (handlers.ctx.registry.get(key).ladder for key in "ab")
    assert ladder_a is not ladder_b and len(ladder_a.rungs) == 2 and len(ladder_b.rungs) == len(RUNGS)
    # the same seed trains the same first rung in any session, whatever the other one does
    assert ladder_a.rungs[0].val_loss == ladder_b.rungs[0].val_loss


def test_the_tab_is_wired_as_a_training_and_sits_before_the_baby():
    ids = [tab_id for tab_id, _, _ in TABS]
    assert ids[ids.index("ladder") - 1: ids.index("ladder") + 2] == ["attention", "ladder", "baby"]
    demo = build_app(Settings(max_trainings=7, step_workers="off"))
    events = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}
    assert (events["ladder"].concurrency_id, events["ladder"].concurrency_limit) == ("train", 7)
    assert (events["ladder_stop"].concurrency_id, events["ladder_stop"].concurrency_limit) == ("cheap", None)
