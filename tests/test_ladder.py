"""The seeds' ladder: each rung at the lecture's sizes, trained in turn, stoppable, from the command line."""

import json
import math

import pytest

from core.__main__ import main
from core.data import load_shakespeare
from core.ladder import LECTURE_MODEL, RUNGS, SCHEDULES, Ladder, ladder_configs, ladder_data

TEXT = load_shakespeare()[:60_000]  # enough for every rung to learn a little in a few steps


@pytest.fixture(scope="module")
def data():
    return ladder_data(TEXT)


def test_the_last_rung_is_the_gpt_with_todays_parts():
    gpt, _ = ladder_configs("gpt", vocab_size=65)
    llama, _ = ladder_configs("llama", vocab_size=65)
    assert (llama.position, llama.norm, llama.activation) == ("rope", "rmsnorm", "swiglu")
    assert (llama.n_layer, llama.n_head, llama.n_embd, llama.block_size) == (gpt.n_layer, gpt.n_head, gpt.n_embd,
                                                                              gpt.block_size)
    assert list(RUNGS)[-2:] == ["gpt", "llama"]


def test_rungs_are_the_stages_at_the_lectures_sizes():
    for stage in RUNGS:
        model, train = ladder_configs(stage, vocab_size=65, steps=500, seed=3)
        assert (model.n_embd, model.block_size) == (32, 32)
        assert model.activation == ("swiglu" if stage == "llama" else "relu")
        assert (train.batch_size, train.learning_rate, train.min_lr, train.max_iters) == (16, 1e-3, 1e-3, 500)
        assert train.seed == 3 and train.eval_interval == 25  # 20 points on each curve
        # the early rungs are one layer as the lecture builds them; the last is three blocks
        assert model.n_layer == (LECTURE_MODEL["n_layer"] if model.use_residual else 1)
        assert model.n_head == (1 if stage == "one_head" else 4)


def test_the_short_schedule_decays_from_a_higher_rate():
    _, lecture = ladder_configs("one_head", vocab_size=65, steps=3000)
    _, short = ladder_configs("one_head", vocab_size=65, steps=3000, schedule=SCHEDULES["short"])
    assert (lecture.learning_rate, lecture.min_lr) == (1e-3, 1e-3)  # the lecture's constant rate
    assert (short.learning_rate, short.min_lr, short.lr_decay_iters) == (3e-3, 3e-4, 3000)
    with pytest.raises(ValueError, match="a schedule sets learning_rate and min_lr"):
        Ladder(*ladder_data(TEXT[:5000]), schedule={"batch_size": 1})


def test_a_climb_trains_every_rung_in_order_and_repeats_exactly(data):
    first = Ladder(*data, steps=30, seed=5, eval_iters=4, device="cpu")
    events = list(first.climb())
    assert [rung.stage for rung in first.rungs] == list(RUNGS)
    assert [e.stage for e in events if e.rung] == list(RUNGS)
    assert all(e.index == list(RUNGS).index(e.stage) and e.total == len(RUNGS) for e in events)
    for rung in first.rungs:
        assert rung.steps == 30 and not rung.stopped and math.isfinite(rung.val_loss)
        assert rung.val_loss < math.log(65)  # every rung learned something, none is dead
        assert [step for step, _ in rung.curve][-1] == 30 and rung.curve[-1][1] == rung.val_loss
    params = {rung.stage: rung.params for rung in first.rungs}
    lecture = [params[stage] for stage in RUNGS if stage != "llama"]
    assert lecture == sorted(lecture) and lecture[0] < lecture[-1]  # each idea of the lecture adds weights
    # today's parts at the same size: no position table (RoPE), a SwiGLU as large as the ReLU layer
    assert abs(params["llama"] - params["gpt"]) < 0.05 * params["gpt"]
    again = Ladder(*data, steps=30, seed=5, eval_iters=4, device="cpu")
    list(again.climb())
    assert [r.val_loss for r in again.rungs] == [r.val_loss for r in first.rungs]  # seeded: same numbers


def test_stop_ends_the_rung_in_training_and_climbs_no_further(data):
    ladder = Ladder(*data, steps=400, seed=1, eval_iters=2, device="cpu")
    for event in ladder.climb():
        if event.stage == "one_head" and event.event.step == 7:
            ladder.stop()
    assert [rung.stage for rung in ladder.rungs] == ["bigram", "positions", "one_head"]
    stopped = ladder.rungs[-1]
    assert stopped.stopped and stopped.steps == 7  # no step after the stop
    assert stopped.curve[-1] == (7, stopped.val_loss) and math.isfinite(stopped.val_loss)


def test_a_ladder_refuses_what_it_cannot_climb(data):
    with pytest.raises(ValueError, match="stages"):
        Ladder(*data, stages=["bigram", "transformer"])
    with pytest.raises(ValueError, match="steps"):
        Ladder(*data, steps=0)


def test_the_command_line_prints_one_line_per_stage(capsys):
    assert main(["ladder", "--steps", "3", "--seed", "2", "--stages", "bigram", "multi_head", "--json",
                 "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["stage"] for row in rows] == ["bigram", "multi_head"]
    assert all(set(row) == {"stage", "val_loss", "params", "seconds"} for row in rows)
    assert rows[0]["params"] < rows[1]["params"] and all(0 < row["val_loss"] < 5 for row in rows)

    assert main(["ladder", "--steps", "2", "--stages", "one_head", "--device", "cpu"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["stage", "params", "val", "loss", "lecture", "seconds"]
    assert table[1].startswith("one_head") and f"{RUNGS['one_head'].lecture_loss:.2f}" in table[1]
