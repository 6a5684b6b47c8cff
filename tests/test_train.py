"""The training engine: events, stop and resume, determinism, the divergence guard."""

import contextlib
import math
import re

import pytest
import torch

from core import checkpoint
from core.config import GPTConfig
from core.data import CORPORA, TokenData, answer_mask, get_batch
from core.model import GPT
from core.optim import learning_rate_at
from core.tokenizers import CharTokenizer
from core.data import every_window_has_an_answer as _every_window_has_an_answer
from core.config import TrainConfig
from core.observers import AttentionProbe, Samples, answer_score, standard
from core.train import Observer, Trainer

TEXT = CORPORA["repeat"].task.corpus(n_lines=300)
TOKENIZER = CharTokenizer.from_text(TEXT)


def tiny_model(seed: int = 0, **fields) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=TOKENIZER.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16)
    return GPT(GPTConfig(**{**config, **fields}))


def tiny_trainer(model: GPT | None = None, **fields) -> Trainer:
    model = model or tiny_model()
    config = dict(max_iters=6, batch_size=4, warmup_iters=2, lr_decay_iters=6, eval_interval=5, eval_iters=2,
                  learning_rate=3e-3, device="cpu")
    data = TokenData.from_text(TEXT, TOKENIZER, model.config.block_size)
    train_config = TrainConfig(**{**config, **fields})
    return Trainer(model, data, train_config, observers=standard(train_config, tokenizer=TOKENIZER))


def weights(model: GPT) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_events_cover_every_step_then_a_final_one():
    trainer = tiny_trainer(sample_interval=3, attention_interval=3)
    events = list(trainer.run())
    assert [e.step for e in events] == [1, 2, 3, 4, 5, 6, 6]
    assert [e.done for e in events] == [False] * 6 + [True]
    assert not events[-1].stopped and events[-1].error is None
    # validation every eval_interval steps and always on the last one
    assert [e.step for e in events[:-1] if e.val_loss is not None] == [5, 6]
    assert [e.step for e in events[:-1] if e.sample is not None] == [3, 6]
    assert all(isinstance(e.sample, str) and len(e.sample) > 1 for e in events if e.sample)
    cfg = trainer.config
    for event in events[:-1]:
        assert event.lr == pytest.approx(learning_rate_at(event.step - 1, cfg.learning_rate, cfg.min_lr,
                                                          cfg.warmup_iters, cfg.lr_decay_iters))
        assert math.isfinite(event.train_loss) and event.tokens_per_sec > 0 and event.elapsed > 0
    assert events[-2].eta == 0
    assert [row["step"] for row in trainer.history] == [1, 2, 3, 4, 5, 6]
    assert trainer.history[4]["val_loss"] == events[4].val_loss


def test_attention_snapshot_has_one_pattern_per_layer():
    trainer = tiny_trainer(attention_interval=2, max_iters=2)
    event = next(e for e in trainer.run() if e.attention is not None)
    T = len(event.probe_ids)
    assert T == 16  # the default probe fills the context
    assert [a.shape for a in event.attention] == [(2, T, T)] * 2
    for pattern in event.attention:
        assert torch.allclose(pattern.sum(-1), torch.ones(2, T), atol=1e-5)
        assert torch.all(pattern.triu(diagonal=1) == 0)  # causal


def test_a_probe_given_is_the_one_attention_is_taken_on():
    model = tiny_model()
    data = TokenData.from_text(TEXT, TOKENIZER, 16)
    trainer = Trainer(model, data, TrainConfig(max_iters=1, batch_size=2, eval_iters=1),
                      observers=[AttentionProbe(every=1, ids=TOKENIZER.encode("abc|abc"))])
    event = next(trainer.run())
    assert event.probe_ids == TOKENIZER.encode("abc|abc")
    assert event.attention[0].shape == (2, 7, 7)


def test_stop_keeps_weights_and_resume_matches_an_uninterrupted_run():
    straight = tiny_trainer()
    straight_losses = [e.train_loss for e in straight.run() if not e.done]

    trainer = tiny_trainer()
    seen = []
    for event in trainer.run():
        if event.done:
            final = event
            break
        seen.append(event.train_loss)
        if event.step == 3:
            at_stop = weights(trainer.model)
            trainer.stop()
    assert final.stopped and final.done and final.step == 3 == trainer.step
    assert_same_weights(weights(trainer.model), at_stop)  # stopping learned nothing more, lost nothing

    resumed = [e.train_loss for e in trainer.run() if not e.done]
    assert trainer.step == 6
    assert seen + resumed == straight_losses  # same optimizer state and batches: the same curve


def test_run_until_continues_in_chunks():
    trainer = tiny_trainer()
    assert [e.step for e in trainer.run(until=2)] == [1, 2, 2]
    assert [e.step for e in trainer.run(until=4)] == [3, 4, 4]
    assert [e.step for e in trainer.run(until=4)] == [4]  # nothing left: only the final event


def test_same_seed_same_curve_and_global_rng_untouched():
    global_state = torch.get_rng_state()
    curves = []
    for _ in range(2):
        trainer = tiny_trainer(tiny_model(dropout=0.1))
        curves.append([(e.train_loss, e.val_loss) for e in trainer.run()])
        torch.set_rng_state(global_state)
    assert curves[0] == curves[1]
    other_seed = tiny_trainer(tiny_model(dropout=0.1), seed=7)
    assert [(e.train_loss, e.val_loss) for e in other_seed.run()] != curves[0]


def test_training_does_not_consume_the_global_rng():
    trainer = tiny_trainer(tiny_model(dropout=0.1), sample_interval=2, attention_interval=2)  # observers too
    before = torch.get_rng_state()
    list(trainer.run())
    assert torch.equal(torch.get_rng_state(), before)


def test_divergence_restores_the_last_good_weights():
    trainer = tiny_trainer(learning_rate=1e30, warmup_iters=0, grad_clip=0.0, max_iters=50)
    curve = trainer.history  # what the app's session holds: it must lose the steps taken back too
    snapshots = {0: weights(trainer.model)}
    events = []
    for event in trainer.run():
        events.append(event)
        if not event.done:
            snapshots[event.step] = weights(trainer.model)
    final = events[-1]
    assert final.done and final.error and "diverged" in final.error and "learning rate" in final.error
    assert final.step < 50 and trainer.step == final.step
    assert_same_weights(weights(trainer.model), snapshots[final.step])
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert [row["step"] for row in trainer.history] == list(range(1, final.step + 1))
    assert curve is trainer.history
    # the user can lower the learning rate and carry on
    trainer.config.learning_rate = trainer.config.min_lr = 1e-3
    assert not any(e.error for e in trainer.run(until=final.step + 2))


def test_divergence_goes_back_to_sound_weights_not_merely_finite_ones():
    """Learning rate 1 without clipping or LayerNorm: the weights are wrecked (losses in the hundreds)
    several steps before anything overflows. Going back one step kept them wrecked; going back to
    the last sound evaluation lets a lower learning rate carry on from a sane loss."""
    model = tiny_model(use_residual=False)  # no LayerNorm to rein in the blow-up
    trainer = tiny_trainer(model, learning_rate=1.0, warmup_iters=0, grad_clip=0.0, max_iters=50, eval_interval=1)
    snapshots, events = {}, []
    for event in trainer.run():
        events.append(event)
        if not event.done:
            snapshots[event.step] = weights(trainer.model)
    final, initial_loss = events[-1], events[0].train_loss
    diverged_at = int(re.search(r"diverged at step (\d+)", final.error)[1])
    assert f"restored to step {final.step}, the last evaluation with a sound validation loss" in final.error
    assert "optimizer's state was reset" in final.error
    # the blow-up was caught while the loss was still finite, and the weights of the evaluation
    # just before it (already wrecked) were not the ones kept
    assert math.isfinite(events[-2].train_loss) and math.isfinite(final.train_loss) and final.train_loss > 100
    assert 0 < final.step < diverged_at - 1
    assert_same_weights(weights(trainer.model), snapshots[final.step])
    assert [row["step"] for row in trainer.history] == list(range(1, final.step + 1))
    assert not trainer.optimizer.state

    trainer.config.learning_rate = trainer.config.min_lr = 1e-3
    carried_on = [e for e in trainer.run(until=final.step + 10) if not e.done]
    assert len(carried_on) == 10 and not any(e.error for e in carried_on)
    assert max(e.train_loss for e in carried_on) < initial_loss + 1


def test_a_run_can_go_back_to_where_it_started_with_the_loss_recorded_there():
    trainer = tiny_trainer(max_iters=4, eval_interval=2)
    list(trainer.run())
    start = weights(trainer.model)
    trainer.config.learning_rate = trainer.config.min_lr = 1e30
    trainer.config.grad_clip = 0.0
    final = list(trainer.run(until=20))[-1]
    recorded = trainer.history[-1]["val_loss"]
    assert f"restored to step 4, the last evaluation with a sound validation loss ({recorded:.3g})" in final.error
    assert trainer.step == 4
    assert_same_weights(weights(trainer.model), start)


def test_estimate_loss_leaves_the_mode_alone():
    trainer = tiny_trainer()
    for training in (True, False):
        trainer.model.train(training)
        losses = trainer.estimate_loss()
        assert trainer.model.training is training
        assert set(losses) == {"train", "val"} and all(math.isfinite(v) for v in losses.values())
    assert trainer.estimate_loss() == trainer.estimate_loss()  # fixed batches
    assert trainer.estimate_loss(("val",)) == {"val": trainer.estimate_loss()["val"]}


def test_state_dict_lets_a_new_trainer_continue_identically():
    first = tiny_trainer()
    list(first.run(until=3))
    copy = tiny_model()
    copy.load_state_dict(first.model.state_dict())
    second = tiny_trainer(copy)
    curve = second.history
    second.load_state_dict(first.state_dict())
    assert second.step == 3 and second.history == first.history
    assert curve is second.history and second.history is not first.history  # filled in place, a copy
    assert [e.train_loss for e in first.run()] == [e.train_loss for e in second.run()]


def test_bfloat16_autocast_on_cpu_trains():
    trainer = tiny_trainer(dtype="bfloat16", max_iters=2)
    events = list(trainer.run())
    assert all(math.isfinite(e.train_loss) for e in events)
    assert next(trainer.model.parameters()).dtype == torch.float32  # master weights stay float32


@pytest.mark.parametrize("field, value", [
    ("max_iters", 0), ("batch_size", -1), ("learning_rate", 0.0), ("grad_clip", float("nan")),
    ("beta2", 1.0), ("device", "tpu"), ("dtype", "float16"), ("eval_iters", 1.5), ("compile", "yes"),
    ("cuda_graphs", 1),
])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_cuda_graphs_are_refused_where_they_cannot_run():
    with pytest.raises(ValueError, match="cuda_graphs and compile"):
        TrainConfig(cuda_graphs=True, compile=True)
    with pytest.raises(ValueError, match="cuda_graphs needs a CUDA device"):
        tiny_trainer(cuda_graphs=True)  # on the CPU


def test_data_shorter_than_the_context_is_refused():
    model = tiny_model(block_size=16)
    short = TokenData(train=torch.zeros(100, dtype=torch.long), val=torch.zeros(10, dtype=torch.long))
    with pytest.raises(ValueError, match="too short"):
        Trainer(model, short, TrainConfig())


def test_training_state_survives_a_checkpoint_and_continues_identically(tmp_path):
    """Saved with the weights (folder and zip), the state lets a fresh process go on exactly."""
    whole = tiny_trainer()
    list(whole.run())
    first = tiny_trainer()
    list(first.run(until=3))
    folder = checkpoint.save(tmp_path / "ck", first.model, TOKENIZER, trainer_state=first.state_dict())
    archive = checkpoint.save_archive(tmp_path / "ck", first.model, TOKENIZER, trainer_state=first.state_dict())
    for path in (folder, archive):
        model, _, _ = checkpoint.load(path)
        state = checkpoint.load_trainer_state(path)
        assert state["step"] == 3 and len(state["history"]) == 3
        resumed = tiny_trainer(model.train())
        resumed.load_state_dict(state)
        list(resumed.run())
        # (the split run also estimated validation loss at step 3, where its first part ended)
        assert [(r["step"], r["train_loss"], r["lr"]) for r in resumed.history] == \
            [(r["step"], r["train_loss"], r["lr"]) for r in whole.history]
        assert_same_weights(weights(resumed.model), weights(whole.model))


def test_a_training_state_for_another_model_is_refused_before_anything_changes(tmp_path):
    small = tiny_trainer()
    list(small.run(until=2))
    other = tiny_trainer(tiny_model(n_embd=32))
    before = weights(other.model)
    with pytest.raises(ValueError, match="belongs to another model"):
        other.load_state_dict(small.state_dict())
    assert other.step == 0 and not other.optimizer.state
    assert_same_weights(weights(other.model), before)
    broken = small.state_dict()
    broken["batch_rng"] = torch.zeros(3, dtype=torch.uint8)
    with pytest.raises(ValueError, match="batch_rng is not a random-generator state"):
        tiny_trainer().load_state_dict(broken)


def test_a_task_corpus_is_scored_on_its_answers():
    model = tiny_model()
    data = TokenData.from_text(TEXT, TOKENIZER, model.config.block_size, answer_after="|")
    # float32: the check by hand below runs without autocast (bfloat16 on CPUs that have it)
    trainer = tiny_trainer(model, max_iters=10, eval_interval=5, dtype="float32")
    trainer.answer_tokens = data.answer_tokens  # the same text, now with its answers known
    loss, right = answer_score(trainer)
    assert loss == pytest.approx(math.log(TOKENIZER.vocab_size), abs=0.5) and right < 0.2  # untrained: guessing
    events = [e for e in trainer.run() if e.val_loss is not None and not e.done]
    assert [e.step for e in events] == [5, 10] and all(e.answer_accuracy is not None for e in events)
    assert trainer.history[-1]["answer_accuracy"] == events[-1].answer_accuracy
    # By hand: the loss and the greedy predictions on the marked targets of the same windows.
    T = model.config.block_size
    n = min(64, (len(data.val) - 1) // T)  # the windows answer_score reads
    x, y = data.val[:n * T].view(n, T), data.val[1:n * T + 1].view(n, T)
    marked = answer_mask(x, *data.answer_tokens)  # the answers whose question is in the same window
    with torch.no_grad():
        logits = model.eval()(x)[0]
    assert answer_score(trainer) == pytest.approx((
        torch.nn.functional.cross_entropy(logits[marked], y[marked]).item(),
        (logits.argmax(-1) == y)[marked].float().mean().item(),
    ), rel=1e-5)
    assert answer_score(tiny_trainer()) is None  # no answers known: nothing to score


def test_answers_only_counts_the_answers_and_only_where_every_window_has_one():
    data = TokenData.from_text(TEXT, TOKENIZER, 36, answer_after="|")
    x, y = get_batch(data.train, 8, 36, torch.Generator().manual_seed(0), data.answer_tokens)
    _, full = get_batch(data.train, 8, 36, torch.Generator().manual_seed(0))
    counted = y != -1
    assert counted.any() and (~counted).any() and torch.equal(y[counted], full[counted])
    bar, newline = TOKENIZER.encode("|")[0], TOKENIZER.encode("\n")[0]
    # the counted targets are the answer letters and the newline that ends them, never the separator
    assert bar not in full[counted].tolist() and newline in full[counted].tolist()
    assert (counted.sum(1) >= 1).all()  # every window of 36 holds a whole question and its answer's start

    model = GPT(GPTConfig(vocab_size=TOKENIZER.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=36))
    answers = Trainer(model, data, TrainConfig(max_iters=2, batch_size=4, answers_only=True, device="cpu"))
    everything = Trainer(model, data, TrainConfig(max_iters=2, batch_size=4, device="cpu"))
    assert answers.estimate_loss(("val",))["val"] != everything.estimate_loss(("val",))["val"]
    # a context shorter than a question holds windows with no answer: then every target counts
    short = TokenData.from_text(TEXT, TOKENIZER, 4, answer_after="|")
    small = GPT(GPTConfig(vocab_size=TOKENIZER.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=4))
    fallback = Trainer(small, short, TrainConfig(max_iters=2, batch_size=4, answers_only=True, device="cpu"))
    assert fallback.counted is None
    assert all(math.isfinite(event.train_loss) for event in fallback.run())


def test_trained_on_answers_alone_the_live_sample_answers_validation_questions():
    """Never taught the random questions, such a model's free-running sample is one word over and
    over; its live sample puts validation questions to it instead, one line each."""
    data = TokenData.from_text(TEXT, TOKENIZER, 36, answer_after="|")
    model = GPT(GPTConfig(vocab_size=TOKENIZER.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=36))
    trainer = Trainer(model, data, TrainConfig(max_iters=2, batch_size=4, answers_only=True, device="cpu",
                                               sample_tokens=60))
    samples = Samples(TOKENIZER)
    lines = samples.sample(trainer).split("\n")
    validation = TOKENIZER.decode(data.val.tolist()).split("\n")[1:]  # whole lines after the first newline
    assert len(lines) >= 2
    for line, truth in zip(lines, validation):
        question, answer = line.split("|", 1)
        assert question == truth.split("|")[0] and len(answer) <= len(truth.split("|")[1]) + 1
    assert samples.sample(trainer) == samples.sample(trainer)  # seeded by the step: the same model gives the same sample


@pytest.mark.parametrize("text", [CORPORA[name].task.corpus(n_lines=300) for name in ("repeat", "induction")],
                         ids=["repeat", "induction"])
def test_answers_only_needs_an_answer_in_every_window_it_can_draw(text):
    """The quick check agrees with answer_mask run on every window, at the context where it flips."""
    tokenizer = CharTokenizer.from_text(text)
    verdicts = {}
    for block_size in range(8, 48):
        data = TokenData.from_text(text, tokenizer, block_size, answer_after="|")
        every_window = [data.train[s: s + block_size] for s in range(len(data.train) - block_size)]
        every_window += [data.val[s: s + block_size] for s in range(len(data.val) - block_size)]
        brute = bool(answer_mask(torch.stack(every_window), *data.answer_tokens).any(-1).all())
        verdicts[block_size] = _every_window_has_an_answer(data, block_size)
        assert verdicts[block_size] == brute, block_size
    assert not verdicts[8] and verdicts[47]  # too short for a question, then long enough


def test_an_observer_sees_every_step_in_order_within_its_turn_and_can_add_to_the_event():
    class Recorder(Observer):
        def __init__(self) -> None:
            self.calls: list = []

        def running(self, trainer):
            self.calls.append("run")
            return super().running(trainer)

        def turn(self, trainer, first):
            self.calls.append(("turn", first))
            return super().turn(trainer, first)

        def on_step(self, trainer, event):
            self.calls.append(("step", event.step, trainer.history[-1]["step"]))
            event.sample = f"seen at {event.step}"  # an observer may add to the event
            trainer.history[-1]["mark"] = event.step  # and to the step's row

    recorder = Recorder()
    trainer = tiny_trainer()
    trainer.observers.insert(0, recorder)
    events = list(trainer.run(until=3))
    assert recorder.calls == ["run", ("turn", True), ("step", 1, 1), ("turn", False), ("step", 2, 2),
                              ("turn", False), ("step", 3, 3)]
    assert [e.sample for e in events[:-1]] == ["seen at 1", "seen at 2", "seen at 3"]
    assert [row["mark"] for row in trainer.history] == [1, 2, 3]
    assert events[-2].tokens_per_sec > 0  # Timing, after it, still filled the event in


def test_a_turn_refused_ends_the_run_before_the_step():
    @contextlib.contextmanager
    def refused():
        yield False

    class Closed(Observer):
        def turn(self, trainer, first):
            return super().turn(trainer, first) if trainer.step < 2 else refused()

    trainer = tiny_trainer()
    trainer.observers.append(Closed())
    events = list(trainer.run())
    assert [e.step for e in events] == [1, 2, 2] and events[-1].stopped and trainer.step == 2


def test_stepping_with_train_step_gives_the_history_of_run():
    ran = tiny_trainer(tiny_model(dropout=0.1))
    list(ran.run())
    stepped = tiny_trainer(tiny_model(dropout=0.1))
    events = [stepped.train_step() for _ in range(stepped.config.max_iters)]
    assert stepped.history == ran.history  # losses, validation losses, learning rates: all of them
    assert_same_weights(weights(stepped.model), weights(ran.model))
    assert [e.val_loss is not None for e in events] == [False] * 4 + [True, True]


def test_the_update_is_a_replaceable_part():
    """A stepper of its own plugs in where the optimizer step is taken; the loop around it is the same."""
    calls = []

    def update(trainer, x, y, lr):
        calls.append((tuple(x.shape), lr))
        return Trainer.gradient_step(trainer, x, y, lr)

    plain = tiny_trainer()
    list(plain.run())
    custom = tiny_trainer()
    custom.update = update
    list(custom.run())
    assert [lr for _, lr in calls] == [row["lr"] for row in plain.history]
    assert {shape for shape, _ in calls} == {(4, 16)}
    assert custom.history == plain.history

    def exploding(trainer, x, y, lr):
        Trainer.gradient_step(trainer, x, y, lr)
        return float("nan"), 1.0  # the guard judges what the update reports

    guarded = tiny_trainer()
    guarded.update = exploding
    final = list(guarded.run())[-1]
    assert final.error and "diverged at step 1" in final.error and guarded.step == 0
