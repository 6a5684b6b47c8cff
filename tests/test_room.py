"""The Train tab's room engine (issue 38): where trainings step together (`stack_steps`), learners
pressing Train at once share the group's ticks, and each gets the curve and weights of a lone run."""

import dataclasses
import threading

import pytest
import torch

from core.group import groupable
from core.train import Trainer
from playground.context import AppContext
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.tabs.train import TrainHandlers
from support.handlers import SETTINGS, run_train


def room(stack_steps: str) -> tuple[AppContext, TrainHandlers]:
    ctx = AppContext(settings=dataclasses.replace(SETTINGS, stack_steps=stack_steps),
                     registry=SessionRegistry(10**9, 600), model_changed=None, tabs=None)
    return ctx, TrainHandlers(ctx)


def train_at_once(train: TrainHandlers, seeds: dict[str, int]) -> dict[str, list]:
    """Every session presses Train at the same moment with its seed; each one's updates."""
    updates: dict[str, list] = {}
    start = threading.Barrier(len(seeds))

    def press(session: str) -> None:
        start.wait()
        updates[session] = run_train(train, session, seed=seeds[session], steps=24, eval_interval=8)

    threads = [threading.Thread(target=press, args=(session,)) for session in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return updates


def test_learners_pressing_train_at_once_step_together_and_learn_as_if_alone():
    seeds = {"ada": 1, "ben": 2, "cy": 3}
    ctx, train = room("on")
    updates = train_at_once(train, seeds)
    assert max(ctx.group.tick_sizes) >= 2, ctx.group.tick_sizes  # they did step together
    assert ctx.group.members == 0 and ctx.trainings == 0  # and left the group when done
    for session, seed in seeds.items():
        assert updates[session][-1][0].startswith("Done: 24 steps"), updates[session][-1][0]
        grouped = ctx.registry.get(session).trained
        assert grouped.trainer.update == ctx.group.update
        alone_ctx, alone = room("off")
        run_train(alone, session, seed=seed, steps=24, eval_interval=8)
        lone = alone_ctx.registry.get(session).trained
        assert lone.trainer.update == Trainer.gradient_step
        assert len(grouped.history) == len(lone.history) == 24
        for a, b in zip(grouped.history, lone.history):
            for key, value in b.items():
                assert a[key] == pytest.approx(value, abs=1e-5), (session, a["step"], key)
        for (name, p), q in zip(grouped.model.named_parameters(), lone.model.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-5, msg=name)


def test_the_status_says_the_room_steps_together():
    _, train = room("on")
    updates = train_at_once(train, {"ada": 1, "ben": 2})
    statuses = [update[0] for session in updates for update in updates[session]]
    assert any("stepping together" in status for status in statuses), statuses


def test_a_model_the_group_cannot_stack_takes_turns_as_before():
    ctx, train = room("on")
    run_train(train, "ada", dropout=0.1, steps=4)
    trainer = ctx.registry.get("ada").trained.trainer
    assert not groupable(trainer) and trainer.update == Trainer.gradient_step
    assert ctx.group.tick_sizes == {}


@pytest.mark.parametrize("mode, stacked", [("on", True), ("off", False), ("auto", torch.cuda.is_available())])
def test_where_trainings_step_together(mode, stacked):
    ctx, _ = room(mode)
    assert ctx.stacked() is stacked


def test_an_unknown_stacking_mode_is_refused():
    with pytest.raises(ValueError, match="stack_steps"):
        Settings(stack_steps="sometimes")


def test_gradio_keeps_the_state_of_every_training_it_admits_beside_its_visitors():
    """An evicted session's state is rebuilt by Gradio at every update of its stream: a room bigger than the
    capacity spent its time rebuilding them (issue 38)."""
    from playground.app import launch_kwargs

    settings = Settings(max_trainings=1100, gradio_state_capacity=100)
    assert launch_kwargs(settings)["state_session_capacity"] == 1200
    assert launch_kwargs(settings)["max_threads"] >= 1100
