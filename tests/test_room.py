"""The Train tab's room engine (issue 38): where trainings step together (`stack_steps`), learners
pressing Train at once share the group's ticks; where they step in worker processes (`step_workers`), the
workers take their steps; either way each gets the curve and weights of a lone run."""

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
from support.app import FORM, api_client, serve
from support.handlers import SETTINGS, run_train


def room(stack_steps: str = "off", step_workers: str = "off") -> tuple[AppContext, TrainHandlers]:
    ctx = AppContext(settings=dataclasses.replace(SETTINGS, stack_steps=stack_steps, step_workers=step_workers),
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
        assert_learned_as_alone(grouped, session, seed)


def assert_learned_as_alone(trained, session: str, seed: int) -> None:
    """`trained` (a session's TrainedModel) has the curve and weights of the same run alone."""
    alone_ctx, alone = room()
    run_train(alone, session, seed=seed, steps=24, eval_interval=8)
    lone = alone_ctx.registry.get(session).trained
    assert lone.trainer.update == Trainer.gradient_step
    assert len(trained.history) == len(lone.history) == 24
    for a, b in zip(trained.history, lone.history):
        for key, value in b.items():
            assert a[key] == pytest.approx(value, abs=1e-5), (session, a["step"], key)
    for (name, p), q in zip(trained.model.named_parameters(), lone.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-5, msg=name)


def test_learners_pressing_train_at_once_step_in_the_workers_and_learn_as_if_alone():
    """On a CPU host the workers take the room's steps (started before the press here: a server's start
    them when a second training joins, and steps go on in the server meanwhile)."""
    seeds = {"ada": 1, "ben": 2, "cy": 3}
    ctx, train = room(step_workers="2")
    ctx.workers.start(wait=True)
    updates = train_at_once(train, seeds)
    assert ctx.workers.worker_steps > 24, ctx.workers.worker_steps  # most of the 72 steps (the last alone: here)
    assert ctx.workers.members == 0 and ctx.trainings == 0
    statuses = [update[0] for session in updates for update in updates[session]]
    assert any("3 trainings share this server" in status for status in statuses), statuses
    for session, seed in seeds.items():
        assert updates[session][-1][0].startswith("Done: 24 steps"), updates[session][-1][0]
        trained = ctx.registry.get(session).trained
        assert trained.trainer.update == ctx.workers.update
        assert_learned_as_alone(trained, session, seed)
    ctx.workers.close()


def test_the_status_says_the_room_steps_together():
    _, train = room("on")
    updates = train_at_once(train, {"ada": 1, "ben": 2})
    statuses = [update[0] for session in updates for update in updates[session]]
    assert any("stepping together" in status for status in statuses), statuses


def test_a_model_the_group_cannot_stack_takes_turns_as_before():
    ctx, train = room("on", step_workers="2")
    run_train(train, "ada", dropout=0.1, steps=4)
    trainer = ctx.registry.get("ada").trained.trainer
    assert not groupable(trainer) and trainer.update == Trainer.gradient_step
    assert ctx.group.tick_sizes == {}


@pytest.mark.parametrize("mode, stacked", [("on", True), ("off", False), ("auto", torch.cuda.is_available())])
def test_where_trainings_step_together(mode, stacked):
    ctx, _ = room(mode)
    assert ctx.stacked() is stacked


@pytest.mark.parametrize("setting, processes", [("off", 0), ("3", 3), ("auto", 2)])
def test_how_many_step_workers_a_server_has(setting, processes, monkeypatch):
    monkeypatch.setattr("playground.settings.default_slots", lambda: 2)  # a two-core Space
    assert Settings(step_workers=setting).worker_processes == processes
    ctx, _ = room(step_workers=setting)
    assert (ctx.workers.processes if ctx.workers else 0) == processes
    assert Settings.local().worker_processes == 0  # a laptop: one training at a time, on every core


@pytest.mark.parametrize("field, value", [("stack_steps", "sometimes"), ("step_workers", "0"),
                                          ("step_workers", "-1"), ("step_workers", "many")])
def test_an_unknown_mode_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        Settings(**{field: value})


def test_gradio_keeps_the_state_of_every_training_it_admits_beside_its_visitors():
    """An evicted session's state is rebuilt by Gradio at every update of its stream: a room bigger than the
    capacity spent its time rebuilding them (issue 38)."""
    from playground.app import launch_kwargs

    settings = Settings(max_trainings=1100, gradio_state_capacity=100)
    assert launch_kwargs(settings)["state_session_capacity"] == 1200
    assert launch_kwargs(settings)["max_threads"] >= 1100


@pytest.mark.integration
def test_a_server_starts_its_workers_at_launch_and_a_room_trains_in_them():
    """A real server with step workers: they start with the app (a room's first press must not wait for their
    imports), learners pressing Train at once over HTTP are stepped by them, and every run ends done."""
    with serve(Settings.from_env({}, step_workers="2")) as (demo, url):
        assert demo.workers is not None and demo.workers.processes == 2
        demo.workers.start(wait=True)  # already started by the app: this waits for their imports only
        clients = [api_client(url) for _ in range(3)]
        jobs = [client.submit(**{**FORM, "steps": 60, "seed": seed}, api_name="/train")
                for seed, client in enumerate(clients, start=1)]
        statuses = [job.result(timeout=300)[0] for job in jobs]
        assert all(status.startswith("Done: 60 steps") for status in statuses), statuses
        assert demo.workers.worker_steps > 0 and demo.workers.members == 0
        for client in clients:
            client.close()
