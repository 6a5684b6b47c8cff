"""Issue 14's Compare runs: core.runs keeps a session's last few runs in bounded memory, and the Train
tab records each run, overlays their curves and shows their attention side by side."""

import json

import gradio as gr
import pytest
import torch

from core.config import GPTConfig
from core.runs import COMPARED, CURVE_POINTS, RUNS_KEPT, RunLog, RunRecord, decode_runs, encode_runs, varying_fields
from core.config import TrainConfig
from playground.tabs.train.compare import CompareHandlers
from support.app import FORM, plotted
from support.handlers import run_train


def history(steps: int, every: int = 100) -> list[dict]:
    return [{"step": s, "train_loss": 3.0 / s, "val_loss": 3.5 / s if s % every == 0 else None}
            for s in range(1, steps + 1)]


def record(number: int, steps: int = 50, maps: torch.Tensor | None = None, **config) -> RunRecord:
    return RunRecord.of(number, GPTConfig(**config), "repeat", history(steps), TrainConfig().to_dict(),
                        ["a"] * 4, maps)


# ---------------------------------------------------------------- core.runs


def test_every_compared_setting_is_a_model_or_training_field():
    fields = set(GPTConfig().to_dict()) | set(TrainConfig().to_dict())
    assert set(COMPARED) <= fields


def test_a_record_thins_its_training_curve_keeps_every_evaluation_and_the_last_step():
    kept = record(1, steps=20_000)
    assert len(kept.train_curve[0]) <= CURVE_POINTS + 1 and kept.train_curve[0][-1] == 20_000
    assert kept.val_curve[0] == list(range(100, 20_001, 100)) and kept.val_loss == pytest.approx(3.5 / 20_000)
    assert kept.step == 20_000 and kept.train_loss == pytest.approx(3.0 / 20_000)


def test_the_log_keeps_the_last_runs_and_a_continued_run_replaces_its_record():
    log = RunLog(max_runs=3)
    numbers = [log.new_number() for _ in range(5)]
    assert numbers == [1, 2, 3, 4, 5]
    for number in numbers:
        log.keep(record(number))
    assert [r.number for r in log.records] == [3, 4, 5]
    log.keep(record(5, steps=80))  # Train on the same model: its record grows, nothing else goes
    assert [(r.number, r.step) for r in log.records] == [(3, 50), (4, 50), (5, 80)]
    assert [r.number for r in log.get([5, 1, 3])] == [3, 5]  # 1 is no longer kept


def test_a_log_comes_back_from_its_bytes_as_it_was():
    log = RunLog(max_runs=3)
    maps = torch.softmax(torch.randn(2, 4, 4, 4), -1)
    for number in [log.new_number() for _ in range(4)]:
        log.keep(record(number, steps=20 * number, maps=maps if number % 2 else None, n_layer=2, n_head=4))
    back = decode_runs(encode_runs(log))
    assert back.max_runs == 3 and back.last_number == 4 and back.new_number() == 5
    for before, after in zip(log.records, back.records, strict=True):
        assert (after.number, after.config, after.corpus, after.train, after.step) == \
            (before.number, before.config, before.corpus, before.train, before.step)
        assert (after.train_curve, after.val_curve, after.probe_labels) == \
            (before.train_curve, before.val_curve, before.probe_labels)
        assert (after.attention is None) == (before.attention is None)
        if after.attention is not None:
            assert torch.equal(after.attention, before.attention)
            assert torch.allclose(after.entropy_bits, before.entropy_bits)


def test_damaged_or_inconsistent_run_bytes_are_refused_by_name():
    log = RunLog()
    log.keep(record(log.new_number(), maps=torch.softmax(torch.randn(4, 4, 4, 4), -1)))
    data = encode_runs(log)
    with pytest.raises(ValueError, match="damaged"):
        decode_runs(data[: len(data) // 2])
    with pytest.raises(ValueError, match="damaged"):
        decode_runs(b"\xff" * 64)
    wrong_shape = RunLog()
    wrong_shape.keep(record(wrong_shape.new_number(), maps=torch.softmax(torch.randn(4, 4, 4, 4), -1)))
    object.__setattr__(wrong_shape.records[0], "config", GPTConfig(n_layer=2))  # maps of 4 layers, config of 2
    with pytest.raises(ValueError, match="run 1 .* shape"):
        decode_runs(encode_runs(wrong_shape))


def test_attention_is_kept_in_half_precision_and_only_within_the_bound():
    maps = torch.softmax(torch.randn(2, 4, 4, 4), -1)
    kept = RunRecord.of(1, GPTConfig(), "x", history(5), {}, ["a"] * 4, maps, max_bytes=2 * maps.numel())
    assert kept.attention.dtype == torch.float16 and kept.nbytes == 2 * maps.numel()
    assert kept.entropy_bits.shape == (2, 4)
    too_big = RunRecord.of(1, GPTConfig(), "x", history(5), {}, ["a"] * 4, maps, max_bytes=2 * maps.numel() - 1)
    assert too_big.attention is None and too_big.entropy_bits is None and too_big.val_curve  # curves stay


def test_the_log_memory_is_bounded_whatever_the_runs():
    log = RunLog()
    for _ in range(10):  # each run's maps are as large as a run may keep: more runs, never more bytes
        maps = torch.rand(4, 8, 32, 32)  # 64 KiB in half precision
        log.keep(RunRecord.of(log.new_number(), GPTConfig(), "x", history(5), {}, ["a"] * 32, maps,
                              max_bytes=64 * 2**10))
    assert len(log.records) == RUNS_KEPT and log.nbytes == RUNS_KEPT * 64 * 2**10


def test_runs_are_told_apart_by_what_differs():
    one, four = record(1, n_head=1, n_embd=32), record(2, n_head=4, n_embd=32, scale_attention=False)
    varying = varying_fields([one, four])
    assert varying == ["n_head", "scale_attention"]
    assert one.describe(varying) == "1 head, √d scaling" and four.describe(varying) == "4 heads, no √d scaling"
    assert varying_fields([one]) == []


# ---------------------------------------------------------------- the Train tab


def test_each_new_model_is_a_run_and_train_on_the_same_model_updates_it(train, ctx):
    compare = CompareHandlers(ctx)
    run_train(train, steps=10)
    run_train(train, steps=20)  # continues the same model: the same run
    list(train.run.train_new(**{**FORM, "steps": 10, "scale_attention": False}, request="a"))
    list(train.run.train_new(**{**FORM, "steps": 10, "n_head": 1}, request="a"))
    runs = ctx.registry.get("a").runs.records
    assert [(r.number, r.step) for r in runs] == [(1, 20), (2, 10), (3, 10)]
    assert runs[1].config.scale_attention is False and runs[2].config.n_head == 1
    assert all(r.attention is not None and r.attention.shape[:2] == (1, r.config.n_head) for r in runs)

    choices, layer, loss, attention, table = compare.refresh("a")
    # the last layer of the deepest run: one-layer runs were offered layers 0-5, and now no slider at all
    assert layer == gr.update(value=0, visible=False)
    assert choices["value"] == [1, 2, 3] and [c[1] for c in choices["choices"]] == [1, 2, 3]
    assert [row[0] for row in table] == ["Run 1", "Run 2", "Run 3"]
    assert table[1][1] == "2 heads, no √d scaling" and table[2][1] == "1 head, √d scaling"
    assert len(loss.data) == 2 * 3  # training and validation of each run
    assert len(attention.data) == 2 + 2 + 1  # every head of layer 0 of each run, side by side
    assert [a.text for a in attention.layout.annotations] == ["R1 H0", "R1 H1", "R2 H0", "R2 H1", "R3 H0"]
    assert "R1 shows its L0" in compare.show([1], 2, "a")[1].layout.title.subtitle.text  # it has one layer

    loss, attention, table = compare.show([3, 1], 0, "a")
    assert [row[0] for row in table] == ["Run 1", "Run 3"] and len(attention.data) == 2 + 1
    assert table[0][1] == "2 heads" and table[1][1] == "1 head"

    list(train.run.train_new(**{**FORM, "steps": 10, "n_layer": 2}, request="a"))  # a deeper run: shown at its last layer
    choices, layer, _, attention, _ = compare.refresh("a")
    assert choices["value"] == [1, 2, 3, 4] and layer == gr.update(maximum=1, value=1, visible=True)
    assert "R1 shows its L0" in attention.layout.title.subtitle.text


def test_gpt_against_llama_style_names_todays_parts(train, ctx):
    # The llama-style preset's parts on the small form: the table names each part that differs.
    run_train(train, steps=10, n_head=4, n_embd=32)
    llama = dict(position="rope", norm="rmsnorm", activation="swiglu", n_kv_head=2)
    list(train.run.train_new(**{**FORM, "steps": 10, "n_head": 4, "n_embd": 32, **llama}, request="a"))
    choices, _, loss, attention, table = CompareHandlers(ctx).refresh("a")
    assert table[0][1] == "positions learned, activation gelu, norm layernorm, no grouped key/value heads"
    assert table[1][1] == "positions rope, activation swiglu, norm rmsnorm, 2 grouped key/value heads"
    assert [a.text for a in attention.layout.annotations] == [f"R{r} H{h}" for r in (1, 2) for h in range(4)]
    assert len(loss.data) == 4 and all(row[5] for row in table)  # both curves, both losses


def test_without_scaling_the_attention_entropy_is_lower(train, ctx):
    # Attention entropy is the table's last column: without √d the softmax saturates (issue 14).
    shape = dict(steps=60, n_embd=64, n_head=1, learning_rate=1e-2)
    run_train(train, **shape)
    list(train.run.train_new(**{**FORM, **shape, "scale_attention": False}, request="a"))
    *_, table = CompareHandlers(ctx).refresh("a")
    scaled, unscaled = table[0][-1], table[1][-1]
    assert unscaled < scaled


def test_compare_runs_returns_the_kept_runs_as_json(train, ctx):
    run_train(train, steps=10)
    answer = CompareHandlers(ctx).compare_runs("a")
    json.dumps(answer)  # plain JSON all the way down
    (run,) = answer["runs"]
    assert run["run"] == 1 and run["step"] == 10 and run["config"]["n_head"] == 2
    attention = torch.tensor(run["attention"])
    assert attention.shape == (1, 2, len(run["probe_tokens"]), len(run["probe_tokens"]))
    assert torch.allclose(attention.sum(-1), torch.ones(1, 2, attention.size(-1)), atol=5e-3)
    assert answer["bytes"] == attention.numel() * 2 and answer["max_runs"] == RUNS_KEPT
    assert CompareHandlers(ctx).compare_runs("nobody") == {"runs": [], "max_runs": RUNS_KEPT, "bytes": 0}


@pytest.mark.parametrize("chosen, layer", [("1", 0), ([1] * (RUNS_KEPT + 1), 0), (["x"], 0), ([True], 0),
                                           ([1], -1), ([1], 99), ([1], None)])
def test_bad_choices_are_refused_clearly(train, ctx, chosen, layer):
    run_train(train, steps=5)
    with pytest.raises(gr.Error):
        CompareHandlers(ctx).show(chosen, layer, "a")


def test_no_runs_yet_says_what_to_do(ctx):
    loss, attention, table = CompareHandlers(ctx).show([1], 0, "a")
    assert "Train a model" in plotted(loss).layout.annotations[0].text and table == []
