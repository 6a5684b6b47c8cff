"""ZeroGPU: training on a Hugging Face Space's shared GPU, in turns, through `@spaces.GPU`.

    gpu = zero_gpu(chunk_s=10.0)        # the decorated chunk runner on a ZeroGPU Space, else None
    route = ZeroGPU(data, config, gpu=gpu, turns=FairShare(2), chunk_s=10.0)
    trainer = Trainer(model, data, cpu_config, observers=[route, *standard(cpu_config, share=cpu_share)])
    for event in run(trainer): ...       # like trainer.run(): one event per update, then a done one

The server's Trainer (on the CPU) is driven through its public API, never subclassed: each GPU call
runs a Trainer of its own in the worker (`train_chunk`), and what comes back is loaded into the server's
(its model's weights, `history`, `step`, `load_state_dict`). The route is one of the trainer's observers,
so the trainer's Stop reaches it; `run(trainer)` is `trainer.run()` for a trainer without one.

On a Space with ZeroGPU hardware the GPU exists only inside functions decorated with the `spaces`
package's `@spaces.GPU`. Each call is scheduled by Hugging Face, asks for a duration up front and
counts against the visitor's daily GPU quota; it runs in a worker process forked from the server,
which gets its arguments and sends back what it yields pickled. In the server's own process torch
is patched to say CUDA is there, but nothing can run on it, so the app keeps everything there on
the CPU (`AppContext.training_device`).

So a model of at least `gpu_min_params` parameters trains in chunks: each chunk is one call of
`train_chunk`, which takes the weights, the optimizer and the random states to the GPU, trains for at
most `chunk_s` seconds and streams back `Update`s: the weights every `UPDATE_INTERVAL_S` (the live
sample, attention map and movie run on the server's copy of the model, so they always show the step
they are labelled with) and, at every evaluation and at the chunk's end, the whole training state (what
the state store keeps must be one consistent step). The chunks of the learners still holding take
turns round-robin (`core.schedule.FairShare`): a learner whose chunk just ended queues behind everyone
waiting, so a room shares the GPU the way it shares the CPU step by step. Stop takes effect at the end
of the chunk running (the worker cannot be told mid-chunk without losing it).

A refusal is not an error: when a chunk cannot run (the visitor's quota is spent, no GPU came, the
worker failed), the model goes back to its last consistent step and the rest of the run trains on the
CPU; `refusal` says why and the status shows it.

Elsewhere (no `spaces` package, or not on ZeroGPU) `zero_gpu()` is None and the app trains as before:
`@spaces.GPU` is a no-op there. The `spaces` package itself is never needed: tests run `train_chunk`
in-process and through a stand-in that forks like its worker does.

Imports core's model, training loop and observers, and gradio for its error type (what `spaces` raises).
Never imports a tab.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gradio as gr
import torch

from core.config import GPTConfig, TrainConfig
from core.data import TokenData
from core.model import GPT
from core.observers import AnswerScore, Timing
from core.schedule import FairShare
from core.train import Observer, TrainEvent, Trainer

UPDATE_INTERVAL_S = 0.5  # weights sent back this often during a chunk: the page refreshes 4 times a second at most
# A chunk asks ZeroGPU for its training time plus this much: the worker's start (CUDA, the first call forks it)
# and the transfers. What is asked for must be left in the visitor's quota, so chunks stay short.
STARTUP_ALLOWANCE_S = 20


@dataclass
class Chunk:
    """What one GPU call needs: the model, its training state, the data, and how far to go (pickled to the worker)."""

    config: GPTConfig
    weights: dict[str, torch.Tensor]
    train_config: TrainConfig  # its device is 'auto': the GPU, in the worker
    state: dict  # Trainer.state_dict()
    data: TokenData
    until: int  # the run's last step
    seconds: float  # train this long at most, then end the chunk with the whole state


@dataclass
class Update:
    """What a chunk sends back (pickled): an event, the history rows since the last update, the weights at
    the event's step, and the whole training state at evaluations and at the chunk's end."""

    event: TrainEvent
    rows: list[dict]
    weights: dict[str, torch.Tensor] | None  # None: as in the update before (a chunk's done event)
    state: dict | None = None


def train_chunk(chunk: Chunk) -> Iterator[Update]:
    """Train `chunk` for at most `chunk.seconds` (at least one step), on the GPU where this runs in ZeroGPU's
    worker (the CPU elsewhere); the update before the chunk's done event has the whole state."""
    model = GPT(chunk.config)
    model.load_state_dict(chunk.weights)
    trainer = Trainer(model, chunk.data, chunk.train_config, observers=[AnswerScore(), Timing()])
    trainer.load_state_dict(chunk.state)
    deadline = time.monotonic() + chunk.seconds
    sent_rows, sent_at = len(trainer.history), -math.inf  # the first step goes out at once: the page shows it learning
    for event in trainer.run(chunk.until):
        if event.done and event.error is None:  # the step before came whole (an evaluation, or the chunk's end)
            yield Update(event, [], None)
            return
        now = time.monotonic()
        ending = not event.done and now >= deadline
        if ending:
            trainer.stop()  # the next event is the chunk's done one
        whole = ending or event.done or event.val_loss is not None or event.error is not None
        if not whole and now - sent_at < UPDATE_INTERVAL_S:
            continue
        weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}
        yield Update(event, trainer.history[sent_rows:], weights, trainer.state_dict() if whole else None)
        sent_rows, sent_at = len(trainer.history), now


def zero_gpu(chunk_s: float) -> Callable[[Chunk], Iterator[Update]] | None:
    """`train_chunk` decorated with `@spaces.GPU` on a ZeroGPU Space; None elsewhere (no `spaces` package,
    or `spaces` says this is not ZeroGPU: its decorator would be a no-op)."""
    try:
        import spaces
        from spaces.config import Config
    except ImportError:
        return None
    if not Config.zero_gpu:
        return None
    return spaces.GPU(duration=math.ceil(chunk_s) + STARTUP_ALLOWANCE_S)(train_chunk)


class ZeroGPU(Observer):
    """How one Trainer trains through `gpu`, chunk by chunk (see the module docstring): attached to it as an
    observer, so its Stop reaches the chunks; `run` drives it. The trainer's own model stays on the CPU,
    where the live views, snapshots and, after a refusal, the rest of the steps run (`Trainer.run`, in
    turns of the CPU's share)."""

    def __init__(self, data: TokenData, config: TrainConfig, *, gpu: Callable[[Chunk], Iterator[Update]],
                 turns: FairShare, chunk_s: float) -> None:
        self.gpu, self.turns, self.chunk_s = gpu, turns, chunk_s
        # the GPU's steps send no samples or attention maps: the views run here, on the weights that come back
        self._data = data
        self._gpu_config = dataclasses.replace(config, device="auto", sample_interval=0, attention_interval=0)
        self.refusal: str | None = None  # why the GPU was not used (the rest of the run trained on the CPU)
        self._halted = False
        self._consistent: tuple[dict, dict] | None = None  # (weights, state) at the last whole update

    def on_stop(self, trainer: Trainer) -> None:
        """End the run at the end of the chunk running (or after the CPU's current step)."""
        self._halted = True
        self.turns.withdraw(trainer)

    def where(self) -> str:
        """Where the run trains, for the status (after a refusal, `refusal` says why it is the CPU)."""
        if self.refusal is not None:
            return "on the CPU"
        sharing = self.turns.members
        return ("on the GPU (ZeroGPU)" + (f", {sharing} trainings taking turns of {self.chunk_s:g} s"
                                          if sharing > 1 else ""))

    def run(self, trainer: Trainer, until: int | None = None) -> Iterator[TrainEvent]:
        """Train `trainer` up to `until` steps (default max_iters) on the GPU, chunk by chunk, yielding the
        chunks' events; on a refusal, on the CPU from the last consistent step."""
        until = trainer.config.max_iters if until is None else until
        if self.refusal is not None:  # refused before: this run trains on the CPU
            yield from trainer.run(until)
            return
        self._halted, trainer.running = False, True
        first, last = True, None  # last: the latest chunk's done event
        try:
            with self.turns.membership(trainer):
                while trainer.step < until and not self._halted:
                    # Events go out while the turn is held: the GPU is busy for the whole chunk anyway,
                    # and the worker goes on while the page is drawn (its updates wait in a pipe).
                    with self.turns.turn(trainer, first=first) as granted:
                        if not granted or self._halted:
                            break
                        first, last = False, (yield from self._chunk(trainer, until))
                    if self.refusal is not None or (last is not None and last.error):
                        break
        finally:
            trainer.running = False
        if self.refusal is not None and not self._halted:
            yield from trainer.run(until)  # the rest on the CPU (its last event is the done one)
            return
        yield trainer.final_event(last, until)  # a diverged chunk's event as it is; else done here, stopped or not

    def _chunk(self, trainer: Trainer, until: int):
        """One GPU call: yields its events but the done one, which it returns (None after a refusal: then
        `refusal` says why, and the model is back at its last consistent step)."""
        weights = {name: tensor.clone() for name, tensor in trainer.model.state_dict().items()}
        self._consistent = (weights, trainer.state_dict())
        chunk = Chunk(trainer.model.config, weights, self._gpu_config, self._consistent[1], self._data, until,
                      self.chunk_s)
        try:
            for update in self.gpu(chunk):
                self._adopt(trainer, update)
                if update.event.done:
                    return update.event
                yield update.event
        except gr.Error as refused:  # what `spaces` raises: quota spent, no GPU, the worker failed
            self.refusal = refused.message or refused.title or "ZeroGPU gave no reason"
            weights, state = self._consistent  # updates that came without the whole state are dropped
            trainer.model.load_state_dict(weights)
            trainer.load_state_dict(state)
        return None

    def _adopt(self, trainer: Trainer, update: Update) -> None:
        """Take an update's weights (and its whole state, when it has one) into the trainer's model."""
        if update.weights is not None:
            trainer.model.load_state_dict(update.weights)
        trainer.history.extend(update.rows)
        trainer.step = update.event.step
        if update.state is not None:
            trainer.load_state_dict(update.state)
            self._consistent = (update.weights, update.state)


def route(trainer: Trainer) -> ZeroGPU | None:
    """The trainer's ZeroGPU route, if it trains through one."""
    return next((observer for observer in trainer.observers if isinstance(observer, ZeroGPU)), None)


def run(trainer: Trainer, until: int | None = None) -> Iterator[TrainEvent]:
    """The trainer's run: chunk by chunk on the GPU where it has a ZeroGPU route, else `Trainer.run`."""
    gpu = route(trainer)
    return trainer.run(until) if gpu is None else gpu.run(trainer, until)
