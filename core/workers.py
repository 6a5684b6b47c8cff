"""Steps in worker processes: a server's trainings take their optimizer steps in a few processes of their
own, so Python's one lock per process no longer makes them wait for each other.

    workers = StepWorkers()                 # one process per core, started when a second training joins
    trainer = Trainer(model, data, config, update=workers.update,
                      observers=[workers.member(), *standard(config)])
    for event in trainer.run(): ...         # each in its own thread, as the app runs them
    workers.close()

Why: a tiny model's step is mostly Python handing small ops to PyTorch (the default task's takes about
8 ms of one core, no less on two threads). Sixty such trainings in threads of one process run one
thread's Python at a time: on two cores a room's steps took 11.6 ms of CPU each against 8.2 alone, and
the cores sat 20-45% idle while the trainings waited for the lock (tests/bench/README.md). In worker
processes every core steps a model.

How: while a member runs (the `member()` observer, from its run's start to its end) its weights and
AdamW moments live in one block of shared memory (a memfd: not /dev/shm, which containers keep small);
its parameters and `trainer.optimizer.state` are views of that block, so a worker steps the very
tensors the trainer reads, and evaluation, samples, snapshots, `state_dict` and checkpoints see each
step at once, nothing copied per step. A member's `update` waits for a free worker (first come, first
served; a run's first step goes ahead, as with turns, so a newcomer sees its first point at once),
sends the batch and the learning rate, and gets back the loss and the gradient norm. A worker builds a
replica of the model (its class and config, the shared block as its weights, an AdamW whose state is
the shared moments) the first time it steps it. When the run ends, the weights and moments are copied
back into private tensors and the workers forget the block: shared memory holds running trainings only.

The same step: a worker's step is `Trainer.gradient_step`'s for one process and one micro-batch (the
only kind a member can be, see `core.group.groupable`): the same forward, precision, clipping and
fused AdamW on the same tensors (tests/test_workers.py: curves and weights equal a lone run's).

The workers only speed things up; nothing needs them. A member alone steps in the server itself, on all
of its threads, as a lone learner always did; so does every step while the workers start (about two
seconds, in the background, when a second member joins), a member whose block could not be had, and
a step whose worker died (the worker is replaced; a step cut off midway may have moved part of the
weights before its retake). The workers run at a lower CPU priority than the server (`NICENESS`): what a
visitor waits for (a click, a generation, the streamed updates) goes before the bulk of the steps.

Never imports gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from pathlib import Path

import torch

from core.group import groupable
from core.optim import configure_optimizer
from core.schedule import FairShare, default_slots
from core.train import Observer, Trainer, precision

ROOT = Path(__file__).resolve().parents[1]  # where `core` is imported from, for the workers
# The workers' CPU priority below the server's (nice): the server's own work (a click, a generation, the
# streamed updates) goes first; the steps take every cycle left.
NICENESS = 5


@dataclass(frozen=True)
class _Recipe:
    """What a worker needs to step a member: the model to rebuild around the block, and the step's settings."""

    model_class: type
    model_config: object
    numels: tuple[int, ...]  # of the parameters, in `named_parameters()` order
    learning_rate: float  # the optimizer's groups, as the trainer's (`configure_optimizer`)
    weight_decay: float
    betas: tuple[float, float]
    grad_clip: float
    amp_dtype: torch.dtype | None


def _block_views(block: torch.Tensor, numels: tuple[int, ...]) -> tuple[list, list, list, list]:
    """The block's layout: every weight, then every first moment, every second moment, every step count."""
    n = sum(numels)
    parts = [block[:n], block[n:2 * n], block[2 * n:3 * n]]
    weights, exp_avgs, exp_avg_sqs = ([*part.split(numels)] for part in parts)
    steps = [*block[3 * n:].split(1)]
    return weights, exp_avgs, exp_avg_sqs, [step.view(()) for step in steps]


class _Shared:
    """A member's weights and moments moved into one shared block for one run (`release` moves them back)."""

    def __init__(self, trainer: Trainer, key: int) -> None:
        self.key, self.trainer = key, trainer
        self.params = [p for _, p in trainer.model.named_parameters()]
        numels = tuple(p.numel() for p in self.params)
        config = trainer.config
        self.recipe = _Recipe(type(trainer.model), trainer.model.config, numels, config.learning_rate,
                              config.weight_decay, (config.beta1, config.beta2), config.grad_clip,
                              trainer._amp_dtype)
        self.nbytes = (3 * sum(numels) + len(numels)) * 4
        self.fd = os.memfd_create(f"playground-member-{key}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.nbytes)
            block = torch.frombuffer(mmap.mmap(self.fd, self.nbytes), dtype=torch.float32)
        except BaseException:
            os.close(self.fd)
            raise
        state = trainer.optimizer.state
        with torch.no_grad():
            for p, weight, exp_avg, exp_avg_sq, step in zip(self.params, *_block_views(block, numels)):
                weight.copy_(p.detach().flatten())
                p.data = weight.view_as(p)
                moments = state.get(p)
                if moments:  # go on from them (a continued run, a loaded state); else the block's zeros are
                    exp_avg.copy_(moments["exp_avg"].flatten())  # what AdamW's first step makes: no moments yet
                    exp_avg_sq.copy_(moments["exp_avg_sq"].flatten())
                    step.copy_(moments["step"])
                state[p] = {"step": step, "exp_avg": exp_avg.view_as(p), "exp_avg_sq": exp_avg_sq.view_as(p)}

    def release(self) -> None:
        """Copy the weights and moments back into private tensors (the block goes once no worker maps it)."""
        state = self.trainer.optimizer.state
        with torch.no_grad():
            for p in self.params:
                p.data = p.data.clone()
                if p in state:  # not after the divergence guard reset the optimizer
                    state[p] = {name: value.clone() for name, value in state[p].items()}
        os.close(self.fd)


def shareable(trainer: Trainer) -> bool:
    """Whether a worker can step this trainer: a step it takes alone in one micro-batch (`groupable`), of
    float32 weights on the CPU, every one of them trained (the block holds a moment for each)."""
    return (groupable(trainer) and trainer.device.type == "cpu" and hasattr(os, "memfd_create")
            and all(p.dtype == torch.float32 and p.requires_grad for p in trainer.model.parameters()))


class _Worker:
    """One worker process and the server's end of its socket."""

    def __init__(self, threads: int) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, "-m", "core.workers", str(theirs.fileno()), str(threads)],
                                        pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.known: set[int] = set()  # the members it has a replica of (by key)
        self.ready = False  # it has imported torch and said so
        self.sending = threading.Lock()  # a step's owner and a leaving member's "forget" may send at once

    def is_ready(self) -> bool:
        """Whether it can step now (it says so once, after its imports); never waits."""
        with contextlib.suppress(EOFError, OSError):  # died while starting: replaced when next looked at
            if not self.ready and self.conn.poll():
                self.ready = self.conn.recv() == "ready"
        return self.ready

    def step(self, shared: _Shared, x: torch.Tensor, y: torch.Tensor, lr: float) -> tuple[float, float]:
        with self.sending:
            if shared.key not in self.known:
                self.conn.send(("attach", shared.key, shared.recipe, shared.nbytes))
                send_handle(self.conn, shared.fd, self.process.pid)
                self.known.add(shared.key)
            self.conn.send(("step", shared.key, x.numpy(), y.numpy(), lr))
        reply = self.conn.recv()
        if isinstance(reply, str):  # the worker's error message
            raise RuntimeError(f"a step worker failed: {reply}")
        return reply

    def forget(self, key: int) -> None:
        with self.sending:
            if key in self.known:
                self.known.discard(key)
                with contextlib.suppress(OSError):  # a dead worker forgot already
                    self.conn.send(("forget", key))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()  # the worker sees the end of its socket and exits
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class StepWorkers:
    """Worker processes that step the trainings of a server; `update` is each member's Trainer `update=`
    (see the module docstring)."""

    def __init__(self, processes: int | None = None, threads: int | None = None) -> None:
        self.processes = default_slots() if processes is None else processes
        if not isinstance(self.processes, int) or self.processes < 1:
            raise ValueError(f"processes must be a positive integer, got {processes!r}")
        self.threads = max(1, default_slots() // self.processes) if threads is None else threads
        self._turns = FairShare(self.processes)  # at most one step per worker at a time, in order of arrival
        self._workers: list[_Worker] = []  # empty until a second member joins; changed in place only
        self._free: list[_Worker] = []  # those no step holds
        self._members: dict[Trainer, _Shared | None] = {}  # running members; None: no block (steps here)
        self._first: set[Trainer] = set()  # members whose run has not stepped yet
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self._started = False
        self.worker_steps = 0  # steps the workers took (the rest were taken in the server)
        weakref.finalize(self, _close_all, self._workers)  # a pool nobody holds stops its processes

    # ------------------------------------------------------------------ membership

    def member(self) -> Observer:
        """The observer that makes a trainer a member while it runs."""
        return _Membership(self)

    @property
    def members(self) -> int:
        """How many trainers are members now."""
        with self._lock:
            return len(self._members)

    @contextlib.contextmanager
    def joined(self, trainer: Trainer) -> Iterator[None]:
        """`trainer` is a member inside the block, its weights and moments in shared memory where they can be."""
        if not shareable(trainer):
            yield
            return
        shared = None
        with contextlib.suppress(OSError):  # no shared memory to be had: it steps here, as it always did
            shared = _Shared(trainer, next(self._keys))
        with self._lock:
            self._members[trainer] = shared
            self._first.add(trainer)
            start = len(self._members) > 1 and not self._started
            self._started |= start
        if start:  # the workers start in the background; steps go on here meanwhile
            threading.Thread(target=self.start, daemon=True, name="step-workers").start()
        try:
            yield
        finally:
            with self._lock:
                del self._members[trainer]
                self._first.discard(trainer)
                workers = list(self._workers)
            if shared is not None:
                shared.release()
                for worker in workers:
                    worker.forget(shared.key)

    def start(self, wait: bool = False) -> None:
        """Start the workers now, not when a second member joins; with `wait`, return once each can step."""
        with self._lock:
            self._started = True
            if not self._workers:
                self._workers.extend(_Worker(self.threads) for _ in range(self.processes))
                self._free = list(self._workers)
            workers = list(self._workers)
        while wait and not all(worker.ready for worker in workers):
            with self._lock:
                for worker in workers:
                    worker.is_ready()
            time.sleep(0.05)

    # ------------------------------------------------------------------ the update

    def update(self, trainer: Trainer, x: torch.Tensor, y: torch.Tensor, lr: float) -> tuple[float, float]:
        """A member's Trainer `update`: its step, in a worker when one is free and others train too."""
        with self._lock:
            shared = self._members.get(trainer)
            first = trainer in self._first
            self._first.discard(trainer)
        asked = time.perf_counter()
        with self._turns.turn(trainer, first=first):
            waited = time.perf_counter() - asked
            trainer.times.waited += waited  # a wait for a worker is a wait for a turn (core.observers.Timing)
            trainer.times.began += waited
            worker = self._take_worker() if shared is not None and self.members > 1 else None
            if worker is None:
                return Trainer.gradient_step(trainer, x, y, lr)
            try:
                result = worker.step(shared, x, y, lr)
            except (OSError, EOFError):  # the worker died: a new one takes its place, this step is taken here
                self._replace(worker)
                return Trainer.gradient_step(trainer, x, y, lr)
            self._give_back(worker)
        for group in trainer.optimizer.param_groups:
            group["lr"] = lr  # as gradient_step leaves it, so state_dict() matches a lone run's
        self.worker_steps += 1
        return result

    def _take_worker(self) -> _Worker | None:
        """A free worker that is ready, or None (none started yet, or still importing)."""
        with self._lock:
            for worker in [w for w in self._free if w.process.poll() is not None]:  # died while free
                self._replace_locked(worker)
            ready = next((w for w in self._free if w.is_ready()), None)
            if ready is not None:
                self._free.remove(ready)
            return ready

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._free.append(worker)

    def _replace(self, worker: _Worker) -> None:
        """A worker that died while it held a step: a fresh one takes its place."""
        with self._lock:
            self._free.append(worker)
            self._replace_locked(worker)

    def _replace_locked(self, worker: _Worker) -> None:
        worker.close()
        fresh = _Worker(self.threads)
        self._workers[self._workers.index(worker)] = fresh
        self._free[self._free.index(worker)] = fresh

    def close(self) -> None:
        """Stop the workers (a server's end; members step here afterwards)."""
        with self._lock:
            self._free = []
        _close_all(self._workers)


def _close_all(workers: list[_Worker]) -> None:
    closing = list(workers)
    workers.clear()
    for worker in closing:
        worker.close()


class _Membership(Observer):
    def __init__(self, workers: StepWorkers) -> None:
        self.workers = workers

    def running(self, trainer: Trainer) -> contextlib.AbstractContextManager:
        return self.workers.joined(trainer)


# ---------------------------------------------------------------------- the worker process


class _Replica:
    """A member's model in a worker: rebuilt from its recipe, its weights and AdamW state the shared block."""

    def __init__(self, recipe: _Recipe, fd: int, nbytes: int) -> None:
        block = torch.frombuffer(mmap.mmap(fd, nbytes), dtype=torch.float32)
        os.close(fd)  # the mapping keeps the block
        self.recipe = recipe
        self.model = recipe.model_class(recipe.model_config)  # its own constant buffers (masks); weights below
        self.params = [p for _, p in self.model.named_parameters()]
        weights, exp_avgs, exp_avg_sqs, steps = _block_views(block, recipe.numels)
        for p, weight in zip(self.params, weights):
            p.data = weight.view_as(p)
        self.optimizer = configure_optimizer(self.model, recipe.learning_rate, recipe.weight_decay, recipe.betas)
        for p, exp_avg, exp_avg_sq, step in zip(self.params, exp_avgs, exp_avg_sqs, steps):
            self.optimizer.state[p] = {"step": step, "exp_avg": exp_avg.view_as(p), "exp_avg_sq": exp_avg_sq.view_as(p)}

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> tuple[float, float]:
        """`Trainer.gradient_step` for one process and one micro-batch, on the shared tensors."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        with precision(self.model, torch.device("cpu"), self.recipe.amp_dtype):
            _, loss = self.model(x, y)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.recipe.grad_clip or math.inf)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss_value, norm_value = torch.stack([loss.detach().float(), grad_norm.float()]).tolist()
        return loss_value, norm_value


def _warm_up() -> None:
    """One step of a tiny layer: PyTorch's optimizer and autograd load what they load lazily (over a
    second on a busy machine) now, not in a learner's first step."""
    layer = torch.nn.Linear(2, 2)
    optimizer = configure_optimizer(layer, 1e-3)
    layer(torch.ones(1, 2)).sum().backward()
    optimizer.step()


def serve(conn: Connection, threads: int) -> None:
    """A worker's loop: replicas attached, steps taken, replicas forgotten, until the server's end closes."""
    torch.set_num_threads(threads)
    with contextlib.suppress(OSError):  # a platform without priorities steps at the server's
        os.nice(NICENESS)
    _warm_up()
    replicas: dict[int, _Replica] = {}
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server closed its end, or died
            return
        kind, key, *rest = message
        try:
            if kind == "attach":
                recipe, nbytes = rest
                replicas[key] = _Replica(recipe, recv_handle(conn), nbytes)
            elif kind == "step":
                x, y, lr = rest
                conn.send(replicas[key].step(torch.from_numpy(x), torch.from_numpy(y), lr))
            elif kind == "forget":
                replicas.pop(key, None)
        except Exception as error:  # noqa: BLE001 (the server shows it; the worker goes on)
            if kind == "step":
                conn.send(f"{type(error).__name__}: {error}")


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])), int(sys.argv[2]))
