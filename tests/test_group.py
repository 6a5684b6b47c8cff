"""Stepping together (core.group): a learner cannot tell from the numbers whether it trained in a group or alone."""

import threading

import pytest
import torch

from core import checkpoint
from core.group import StepGroup, groupable, stacked_step
from core.train import Observer, Trainer
from support.lessons import TOKENIZER, TOLERANCE, assert_same_lesson, learner, lesson, run_threads

def test_a_group_trains_each_learner_as_if_alone():
    """Three learners with settings of their own (one pressing Stop halfway, then Train again, one leaving
    early) and a fourth joining mid-way with batches of another size, each in its own thread: every curve,
    answer score, weight and optimizer moment is the lone run's."""
    group = StepGroup(max_wait=30.0)  # ticks fire when every running member has arrived: the wait never ends one
    plan = {1: dict(stop_at=6),
            2: dict(learning_rate=2e-3, weight_decay=0.05, beta1=0.8, beta2=0.95, grad_clip=0.5),  # its own settings
            3: dict(max_iters=5, lr_decay_iters=5, grad_clip=0.0),  # leaves early; never clipped
            4: dict(batch_size=8)}  # a stack of its own
    fields = {seed: {k: v for k, v in p.items() if k != "stop_at"} for seed, p in plan.items()}
    grouped = {seed: learner(seed, group, **fields[seed]) for seed in plan}
    alone = {seed: learner(seed, **fields[seed]) for seed in plan}

    late = threading.Thread(target=lesson, args=(grouped[4], None))

    class StartTheLateOne(Observer):  # learner 4 presses Train while 1 is at step 3
        def on_step(self, trainer, event):
            if event.step == 3 and not late.is_alive() and grouped[4].step == 0:
                late.start()

    grouped[1].observers.append(StartTheLateOne())
    run_threads([lambda s=seed: lesson(grouped[s], plan[s].get("stop_at")) for seed in (1, 2, 3)])
    late.join(timeout=120)
    for seed in plan:
        lesson(alone[seed], plan[seed].get("stop_at"))
        assert_same_lesson(grouped[seed], alone[seed])
    assert group.members == 0 and group.timeouts == 0
    assert max(group.tick_sizes) >= 3  # they did step together


def test_a_checkpoint_of_a_grouped_run_continues_alone_identically(tmp_path):
    """Saved (core.checkpoint, as the app and the CLI save) halfway through a grouped run, loaded into a
    fresh lone trainer: it goes on exactly as the grouped run does."""
    group = StepGroup(max_wait=30.0)
    grouped = [learner(seed, group) for seed in (1, 2)]
    run_threads([lambda t=t: list(t.run(until=6)) for t in grouped])
    assert group.tick_sizes[2] >= 1
    path = checkpoint.save(tmp_path / "ck", grouped[0].model, TOKENIZER, trainer_state=grouped[0].state_dict())

    resumed = learner(1)  # fresh: its weights, step, moments, random states and curve come from the checkpoint
    resumed.model.load_state_dict(checkpoint.load(path)[0].state_dict())
    resumed.load_state_dict(checkpoint.load_trainer_state(path))
    run_threads([lambda t=t: list(t.run()) for t in grouped])
    list(resumed.run())
    assert_same_lesson(grouped[0], resumed)


def test_a_lone_member_steps_at_once_and_an_outsider_steps_alone():
    """A group of one never waits for absent members; a trainer that never joined steps without the group."""
    group = StepGroup(max_wait=30.0)
    member = learner(1, group)
    list(member.run())
    outsider = learner(2, max_iters=3)
    outsider.update = group.update  # an update without membership: a tick of its own, at once
    list(outsider.run())
    assert group.timeouts == 0 and member.step == 12 and outsider.step == 3


def test_models_with_dropout_are_not_grouped_and_train_as_alone():
    group = StepGroup(max_wait=30.0)
    grouped, alone = learner(1, group, dropout=0.1), learner(1, dropout=0.1)
    assert not groupable(grouped)
    list(grouped.run())
    list(alone.run())
    assert grouped.history == alone.history and not group.tick_sizes


def test_after_a_divergence_a_grouped_learner_starts_afresh_as_a_lone_one_does():
    """The guard restores weights and clears AdamW's state; the next stacked step starts new moments."""
    pair = [learner(1), learner(1)]
    for trainer in pair:
        list(trainer.run(until=4))
        trainer.optimizer.state.clear()
    x, y = pair[0].batch()
    pair[1].batch()
    stacked = stacked_step([(pair[0], x, y, 1e-3)])[0]
    lone = Trainer.gradient_step(pair[1], x, y, 1e-3)
    assert stacked == pytest.approx(lone, abs=TOLERANCE)
    for p, q in zip(pair[0].model.parameters(), pair[1].model.parameters()):
        torch.testing.assert_close(p, q, atol=TOLERANCE, rtol=0)


def test_a_member_paused_between_steps_holds_the_others_back_only_until_the_wait_ends():
    """A run whose events nobody reads (a browser gone quiet) is still a member; the others step without it
    after `max_wait`, and their lessons are unchanged. Dropping the paused run makes it leave."""
    group = StepGroup(max_wait=0.01)
    paused, busy = learner(1, group), learner(2, group)
    events = paused.run()
    next(events)  # one step, then its reader stops reading: it stays a member
    assert group.members == 1
    run_threads([lambda: list(busy.run())])
    assert busy.step == 12 and group.timeouts == 12  # each of its ticks waited for the paused one, then went
    alone = learner(2)
    list(alone.run())
    assert_same_lesson(busy, alone)
    events.close()
    assert group.members == 0
