"""ZeroGPU (playground.zerogpu): training in GPU calls, chunk by chunk, as `@spaces.GPU` runs them.

The GPU calls run through `tests/fake_spaces`, a stand-in for the `spaces` package that forks a worker for
each call and pickles what crosses, as `spaces` does on a ZeroGPU Space (no GPU here: the worker trains on
the CPU). Chunked training must give the very curve and weights of one plain run; a refusal or a worker
that dies carries on on the CPU from the last consistent step; Stop ends at a chunk's end; learners take
turns chunk by chunk; and nothing of it runs where `spaces` is missing or says this is not ZeroGPU.
"""

import importlib
import inspect
import sys
import threading
from pathlib import Path

import pytest
import torch

from core.config import GPTConfig, TrainConfig
from core.data import CORPORA, TokenData
from core.model import GPT
from core.schedule import FairShare
from core.tokenizers import CharTokenizer
from core.observers import standard
from core.train import Trainer
from playground import zerogpu
from playground.zerogpu import ZeroGPU, train_chunk

FAKE_SPACES = str(Path(__file__).resolve().parent / "fake_spaces")
TEXT = CORPORA["repeat"].task.corpus(n_lines=300)
TOKENIZER = CharTokenizer.from_text(TEXT)
DATA = TokenData.from_text(TEXT, TOKENIZER, 16)
STEPS = 12


def model(seed: int = 0) -> GPT:
    return GPT(GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16),
               generator=torch.Generator().manual_seed(seed))


def train_config(**fields) -> TrainConfig:
    config = dict(max_iters=STEPS, batch_size=4, warmup_iters=2, lr_decay_iters=STEPS, eval_interval=4, eval_iters=2,
                  learning_rate=3e-3, device="cpu")
    return TrainConfig(**{**config, **fields})


def plain_run(seed: int = 0) -> Trainer:
    config = train_config(seed=seed)
    trainer = Trainer(model(seed), DATA, config, observers=standard(config, tokenizer=TOKENIZER))
    list(trainer.run())
    return trainer


def chunked(gpu, seed: int = 0, chunk_s: float = 0.0, turns: FairShare | None = None) -> Trainer:
    """A trainer with a ZeroGPU route (`zerogpu.route(trainer)`); run it with `zerogpu.run(trainer)`.
    chunk_s 0: every chunk trains one step, so a run of STEPS steps makes STEPS calls."""
    config = train_config(seed=seed)
    route = ZeroGPU(DATA, config, gpu=gpu, turns=turns or FairShare(1), chunk_s=chunk_s)
    return Trainer(model(seed), DATA, config, observers=[route, *standard(config, tokenizer=TOKENIZER,
                                                                           share=FairShare(1))])


def assert_same_run(trainer: Trainer, reference: Trainer) -> None:
    assert trainer.step == reference.step == STEPS
    assert [(r["step"], r["train_loss"], r["val_loss"], r["lr"]) for r in trainer.history] == \
        [(r["step"], r["train_loss"], r["val_loss"], r["lr"]) for r in reference.history]
    for (name, ours), theirs in zip(trainer.model.state_dict().items(), reference.model.state_dict().values()):
        assert torch.equal(ours, theirs), name
    ours, theirs = trainer.state_dict()["optimizer"]["state"], reference.state_dict()["optimizer"]["state"]
    assert all(torch.equal(ours[i]["exp_avg_sq"], theirs[i]["exp_avg_sq"]) for i in theirs)


@pytest.fixture
def spaces(monkeypatch):
    """The stand-in `spaces` package on a ZeroGPU Space (SPACES_ZERO_GPU=true), fresh for each test."""
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.syspath_prepend(FAKE_SPACES)
    for name in ("spaces", "spaces.config"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module("spaces")
    yield module
    for name in ("spaces", "spaces.config"):
        sys.modules.pop(name, None)


def test_chunks_in_process_train_the_same_curve_as_one_run():
    calls = []

    def gpu(chunk):
        calls.append(chunk.state["step"])
        yield from train_chunk(chunk)

    trainer = chunked(gpu)
    events = list(zerogpu.run(trainer))
    assert calls == list(range(STEPS))  # one step a chunk: a fresh trainer for each, from the state sent
    assert [e.step for e in events] == list(range(1, STEPS + 1)) + [STEPS]
    assert events[-1].done and not events[-1].stopped and events[-1].val_loss is not None
    assert_same_run(trainer, plain_run())


def test_chunks_in_forked_workers_train_the_same_curve(spaces):
    gpu = zerogpu.zero_gpu(chunk_s=0.0)
    assert gpu is not None and gpu is not train_chunk  # decorated: each call forks a worker
    trainer = chunked(gpu)
    list(zerogpu.run(trainer))
    assert len(spaces.calls) == STEPS and all(pid != spaces.os.getpid() for pid, _ in spaces.calls)
    assert {duration for _, duration in spaces.calls} == {zerogpu.STARTUP_ALLOWANCE_S}
    route = zerogpu.route(trainer)
    assert route.refusal is None and route.where() == "on the GPU (ZeroGPU)"
    assert_same_run(trainer, plain_run())


def test_a_refusal_goes_on_on_the_cpu_from_the_last_chunk(spaces):
    spaces.quota_s = 3 * zerogpu.STARTUP_ALLOWANCE_S  # three chunks, then "quota exceeded"
    trainer = chunked(zerogpu.zero_gpu(chunk_s=0.0))
    events = list(zerogpu.run(trainer))
    assert len(spaces.calls) == 3 and spaces.refused == 1
    route = zerogpu.route(trainer)
    assert "exceeded your free ZeroGPU quota" in route.refusal
    assert route.where() == "on the CPU"
    assert events[-1].done and not events[-1].stopped
    assert_same_run(trainer, plain_run())
    list(zerogpu.run(trainer, STEPS))  # refused once: a later run does not ask again (it would be refused again)
    assert spaces.refused == 1


def test_a_worker_dying_mid_chunk_loses_nothing(spaces, monkeypatch):
    monkeypatch.setattr(zerogpu, "UPDATE_INTERVAL_S", 0.0)  # an update every step
    spaces.fail_after = 2  # the worker dies after two updates, before the chunk's state came back
    trainer = chunked(zerogpu.zero_gpu(chunk_s=60.0), chunk_s=60.0)  # one chunk for the whole run
    seen = []
    for event in zerogpu.run(trainer):
        seen.append(event.step)
    assert seen[:2] == [1, 2]  # shown as they came, then taken back: the CPU trained from step 0 again
    assert zerogpu.route(trainer).refusal == "GPU task aborted"
    assert seen[2:] == list(range(1, STEPS + 1)) + [STEPS]
    assert_same_run(trainer, plain_run())


def test_stop_ends_at_the_chunks_end_and_the_run_continues_the_same_curve():
    trainer = chunked(train_chunk)
    events = []
    for event in zerogpu.run(trainer):
        events.append(event)
        if event.step == 5 and not event.done:
            trainer.stop()
    assert events[-1].done and events[-1].stopped and trainer.step == 5
    assert trainer.history[-1]["step"] == 5
    list(zerogpu.run(trainer))
    assert_same_run(trainer, plain_run())


def test_an_evaluation_brings_back_the_whole_state(monkeypatch):
    """What the state store keeps at an evaluation (weights, optimizer, step) must be one step's."""
    kept = []
    trainer = chunked(train_chunk, chunk_s=60.0)  # one chunk for the whole run
    for event in zerogpu.run(trainer):
        if event.val_loss is not None and not event.done:
            state = trainer.state_dict()
            kept.append((event.step, state["step"], len(state["history"]), len(state["optimizer"]["state"])))
    assert kept == [(4, 4, 4, len(list(trainer.model.parameters()))), (8, 8, 8, len(list(trainer.model.parameters()))),
                    (12, 12, 12, len(list(trainer.model.parameters())))]


def test_learners_take_turns_chunk_by_chunk():
    turns, order, lock = FairShare(1), [], threading.Lock()

    def gpu(chunk):
        with lock:
            order.append(chunk.train_config.seed)
        threading.Event().wait(0.02)  # a GPU call takes a while: the others queue meanwhile
        yield from train_chunk(chunk)

    trainers = [chunked(gpu, seed=seed, turns=turns) for seed in (1, 2, 3)]
    statuses = set()
    threads = [threading.Thread(target=lambda t=t: statuses.update(zerogpu.route(t).where() for _ in zerogpu.run(t)))
               for t in trainers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(order) == sorted([1, 2, 3] * STEPS)
    # Once all three hold, nobody has two chunks in a row while the others still train: round-robin.
    start = max(order.index(seed) for seed in (1, 2, 3))
    end = min(len(order) - order[::-1].index(seed) for seed in (1, 2, 3))
    middle = order[start:end]
    assert len(middle) > 2 * 3 and all(a != b for a, b in zip(middle, middle[1:])), order
    assert "on the GPU (ZeroGPU), 3 trainings taking turns of 0 s" in statuses
    for trainer, seed in zip(trainers, (1, 2, 3)):
        assert_same_run(trainer, plain_run(seed))


def test_no_gpu_calls_without_spaces_or_off_zerogpu(monkeypatch, spaces):
    monkeypatch.setattr(spaces.Config, "zero_gpu", False)
    assert zerogpu.zero_gpu(10.0) is None  # the decorator would be a no-op: nothing to route
    monkeypatch.setitem(sys.modules, "spaces", None)  # not installed
    assert zerogpu.zero_gpu(10.0) is None


def test_the_app_routes_big_models_to_the_gpu_and_small_ones_to_the_cpu():
    import dataclasses

    from playground.context import AppContext
    from playground.sessions import SessionRegistry
    from playground.settings import Settings

    settings = Settings(gpu_min_params=1000, model_memory_bytes=10**9)
    off = AppContext(settings=settings, registry=SessionRegistry(10**9, 600), model_changed=None, tabs=None)
    on = dataclasses.replace(off, gpu=train_chunk)
    small, big = 999, 1000
    assert zerogpu.route(off.trainer(model(), DATA, train_config(), big)) is None
    assert off.training_device(big) == "auto" and off.training_device(small) == "cpu"
    trainer = on.trainer(model(), DATA, train_config(device="auto"), big)
    assert zerogpu.route(trainer) is not None and trainer.device.type == "cpu"  # its own copy stays on the CPU
    assert zerogpu.route(on.trainer(model(), DATA, train_config(), small)) is None
    assert on.training_device(big) == "cpu"  # on ZeroGPU, torch's "CUDA is here" is not true in this process


@pytest.mark.integration
def test_the_app_on_zerogpu_trains_in_gpu_calls_and_carries_on_when_refused(spaces):
    """The whole app on a free port, as on a ZeroGPU Space: Train runs in forked GPU calls, the status says
    so, Generate reads the model in the server's process; a refused call finishes the run on the CPU."""
    from support.app import FORM, api_client, serve

    from playground.settings import Settings

    settings = Settings.from_env({}, gpu_min_params=1, zero_gpu_chunk_s=0.1)  # the tiny model goes to the GPU
    with serve(settings) as (demo, url):
        client = api_client(url)
        job = client.submit(**{**FORM, "steps": 150}, api_name="/train")
        statuses = [update[0] for update in job]
        assert job.outputs()[-1][0].startswith("Done: 150 steps"), statuses
        assert any("on the GPU (ZeroGPU)" in status for status in statuses), statuses
        assert spaces.calls and all(pid != spaces.os.getpid() for pid, _ in spaces.calls)
        session = demo.registry.peek(client.session_hash)
        assert session.trainer.step == 150 and next(session.model.parameters()).device.type == "cpu"
        tokens, text, status = client.predict("abc", 10, 1.0, 0, 1.0, None, api_name="/generate")
        assert len(text) > len("abc"), status

        calls = len(spaces.calls)
        spaces.quota_s = spaces.calls[0][1]  # the visitor's quota holds one more call
        job = client.submit(**{**FORM, "steps": 300}, api_name="/train")  # continues from step 150
        statuses = [update[0] for update in job]
        assert job.outputs()[-1][0].startswith("Done: 300 steps"), statuses
        assert len(spaces.calls) == calls + 1 and spaces.refused == 1
        assert any(status.startswith("Training on the CPU; about") and
                   "left. ZeroGPU refused the GPU: You have exceeded your free ZeroGPU quota" in status
                   for status in statuses), statuses
        assert session.trainer.step == 300


def test_the_real_spaces_package_off_zerogpu_routes_nothing(monkeypatch):
    """Hugging Face's own `spaces` (a test dependency), as on any machine but a ZeroGPU Space: its decorator is
    a no-op, so the app trains as it always does; and it takes `duration` as the stand-in does."""
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    for name in [name for name in sys.modules if name == "spaces" or name.startswith("spaces.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        # requirements-test.txt installs it; a machine without it runs the app's tests all the same (this one aside)
        spaces = pytest.importorskip("spaces", reason="Hugging Face's spaces package is not installed")
        assert "fake_spaces" not in spaces.__file__
        assert zerogpu.zero_gpu(10.0) is None
        assert spaces.GPU(duration=30)(train_chunk) is train_chunk
        assert "duration" in inspect.signature(spaces.GPU).parameters
    finally:
        for name in [name for name in sys.modules if name == "spaces" or name.startswith("spaces.")]:
            del sys.modules[name]
