"""The training loop: a stoppable, resumable run of optimizer steps that streams one event per step.

    config = TrainConfig(max_iters=500)
    trainer = Trainer(model, data, config, observers=standard(config, tokenizer=tok))  # core.observers
    for event in trainer.run():          # a generator: the caller decides when to look
        print(event.step, event.train_loss, event.eta)
    trainer.stop()                       # from any thread: ends run() after the current step

The loop is the steps, the evaluations (validation loss every `eval_interval` steps and on the last
one), resuming (`state_dict` / `load_state_dict`), the divergence guard, and DDP with gradient
accumulation as the steps need them. Everything else watches it: observers (`Observer`, the ones the
project uses are in `core.observers`) pace each step (turns of a shared server), and add to each
step's event within that turn (answer scores, live samples, attention maps, tokens/s and the time left).

Each step is one call of `train_step()` (public: a caller may step the trainer itself; run() is that
call in a loop, with the observers' turns around it and stop between steps). A step is:
    x, y = trainer.batch()                             # the next batch, from the trainer's generator
    loss, grad_norm = trainer.update(trainer, x, y, lr)  # the replaceable part: one optimizer step
then the guard, the step count, the evaluation when due, the history row and the observers. `update` is
`gradient_step` unless the constructor is given another (`update=`), with the same contract: leave the
model one optimizer step further on the batch at that learning rate and return the batch's loss and
the gradient norm as floats. A way of stepping several models at once (a stacked, vmapped step for a
group of learners, each with its own Trainer running in its own thread, as the app runs them) plugs in
there: each member's `update` hands its batch and learning rate to the group and returns its own loss
and norm once the group's one step is taken, while each trainer keeps this loop (its schedule position,
guard, evaluations, history and events).

AdamW (decay on matrices only), linear warmup + cosine decay, gradient clipping.
Batches come from the trainer's own seeded generators, so the same seed, config and data
give the same loss curve on CPU, and the library never reseeds torch's global RNG (dropout
draws from a private CPU generator state, seeded from the config, swapped in for each step).

Devices and precision (`core.device`): `device="auto"` picks CUDA, then Apple MPS, then the CPU;
`dtype="auto"` trains under bfloat16 autocast on CUDA and on CPUs with AMX, where it is faster, and
in float32 elsewhere; `compile=True` wraps the model in `torch.compile`. The library never changes torch's
thread count: a process running several trainings should set it (the CLI has --threads).

Several processes (DDP, `core.distributed`): each draws the whole global batch of `batch_size` rows
from the same seeded generator, trains on its share of the rows `micro_batch_size` at a time (gradient
accumulation), and DistributedDataParallel averages the gradients: the processes take the steps one
process would take on the whole batch and stay equal (weights, optimizer, random states, loss curve),
so any one of them can save them all. Their dropout differs: a seed drawn from the shared state, plus
the rank. Evaluation is split between them and reduced: every process gets the same loss.

Divergence guard: after every update the loss and the gradient norm are checked. A non-finite
value, or a training loss far above that of guessing uniformly, ends training with a message; the
weights go back to the last good ones (those at the start of the run, of a loaded state, or at the
latest evaluation with a sound validation loss, see `Trainer._sound`), and AdamW starts afresh.

Never imports its observers (`core.observers` imports this), checkpoints (the CLI saves them; a training
state is a plain dict here), gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.nn.parallel import DistributedDataParallel

from core.config import TrainConfig
from core.data import TokenData, every_window_has_an_answer, get_batch
from core.device import autocast_dtype
from core.distributed import SINGLE, Processes, seeded
from core.model import GPT
from core.optim import configure_optimizer, learning_rate_at


@dataclass
class TrainEvent:
    """One per optimizer step, plus a final one with done=True (finished, stopped or diverged)."""

    step: int  # steps completed so far (1-based after the first step)
    max_iters: int
    train_loss: float
    val_loss: float | None  # set on evaluation steps only (and always on the last step)
    lr: float
    tokens_per_sec: float = 0.0  # smoothed (core.observers.Timing)
    elapsed: float = 0.0  # seconds of training so far (across runs)
    eta: float = 0.0  # seconds left, estimated (core.observers.Timing)
    sample: str | None = None  # decoded fresh sample, on sample steps (core.observers.Samples)
    attention: list[torch.Tensor] | None = None  # per layer (H, T, T) for the probe (core.observers.AttentionProbe)
    probe_ids: list[int] | None = None
    # On evaluation steps of a task corpus (TokenData.answer_tokens): loss and greedy accuracy on the
    # answer halves of validation lines, the part a model can learn; the random questions set a
    # floor under the whole-line loss that these do not have (core.observers.AnswerScore).
    answer_loss: float | None = None
    answer_accuracy: float | None = None
    done: bool = False
    stopped: bool = False
    error: str | None = None  # divergence message (weights restored to the last good ones)


@dataclass
class StepTimes:
    """The clock of the step being taken, for observers that time it (`time.perf_counter()` seconds)."""

    waited: float = 0.0  # how long it waited for its turn (the observers' `turn`s; 0 outside run())
    began: float = 0.0  # when its update began
    updated: float = 0.0  # when its update (forward, backward, optimizer) ended


class Observer:
    """Watches a Trainer's runs; every hook does nothing unless a subclass says otherwise.

    Hooks are called in the order of the trainer's `observers`: an observer that times the others'
    work goes last (core.observers.Timing).
    """

    def running(self, trainer: Trainer) -> contextlib.AbstractContextManager:
        """Entered around each run() (a shared server counts the trainings taking part)."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def turn(self, trainer: Trainer, first: bool) -> Iterator[bool]:
        """Held around each step of run() and its observers' work; yield False to end the run before
        the step (a stop came while waiting). `first`: the run's first step."""
        yield True

    def on_step(self, trainer: Trainer, event: TrainEvent) -> None:
        """After a step's update and evaluation, within its turn (not after a divergence): may add to
        the event, and to the step's row of `trainer.history`."""

    def on_stop(self, trainer: Trainer) -> None:
        """stop() was called, from any thread: let a wait for a turn end now."""


# The replaceable part of a step: (trainer, inputs, targets, learning rate) -> (loss, gradient norm), the
# model one optimizer step further (Trainer.gradient_step is the default; see the module docstring).
UpdateFn = Callable[["Trainer", torch.Tensor, torch.Tensor, float], tuple[float, float]]


class Trainer:
    """Trains `model` on `data` one step at a time; see the module docstring."""

    def __init__(
        self,
        model: GPT,
        data: TokenData,
        config: TrainConfig,
        *,
        observers: Sequence[Observer] = (),
        processes: Processes = SINGLE,
        update: UpdateFn | None = None,
    ) -> None:
        self.config = config
        self.observers = list(observers)
        self.processes = processes
        self.update = update or type(self).gradient_step
        self.device = processes.device(config.device)
        self.model = model.to(self.device)
        block_size = model.config.block_size
        if min(len(data.train), len(data.val)) <= block_size:
            raise ValueError(f"the data is too short for a context of {block_size} tokens")
        # This process's rows of each global batch, and its micro-batches' (gradient accumulation).
        self._rows, self.micro_batch = processes.share(config.batch_size, config.micro_batch_size)
        self.accumulation_steps = (self._rows.stop - self._rows.start) // self.micro_batch
        self.train_data = data.train.to(self.device)
        self.val_data = data.val.to(self.device)
        self.answer_tokens = data.answer_tokens  # a task's separator and newline: where its answers are
        # the targets the loss counts: all of them (None), or the answers alone (as `answer_mask` finds them)
        self.counted = None
        if config.answers_only and every_window_has_an_answer(data, block_size):
            self.counted = data.answer_tokens

        self.optimizer = configure_optimizer(
            model, config.learning_rate, config.weight_decay, (config.beta1, config.beta2)
        )
        self._amp_dtype = autocast_dtype(self.device, config.dtype)
        # The model's forward pass (compiled or not: the compiled module shares the parameters; hooks,
        # as attention snapshots use, need the plain `model`).
        self.forward = torch.compile(model) if config.compile else model
        # Training's forward passes go through DDP, which averages the gradients across processes in
        # the backward pass; evaluations, samples and snapshots need no gradients and use the model.
        self._train_forward = self.forward if not processes.distributed else DistributedDataParallel(
            self.forward, device_ids=[self.device] if self.device.type == "cuda" else None)
        if config.cuda_graphs and (self.device.type != "cuda" or processes.distributed):
            raise ValueError("cuda_graphs needs a CUDA device and a single process (no DDP)")
        self._graphed_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None  # at the 1st step
        self._params = [p for p in model.parameters() if p.requires_grad]
        # The one snapshot a divergence goes back to: its weights, step and validation loss (if known).
        self._good = [p.detach().clone() for p in self._params]
        self._good_step = 0
        self._good_loss: float | None = None
        # A training loss ten times that of guessing uniformly (ln vocab_size, about what a fresh
        # model scores) means wrecked weights even while it is finite: stop there, not at the overflow.
        self._loss_ceiling = 10 * (math.log(model.config.vocab_size) + 1)

        # Private randomness: batches from our own generator; dropout from a private copy of
        # the global CPU RNG state, so training never disturbs (or depends on) other users of it.
        self._batch_rng = torch.Generator().manual_seed(config.seed)
        self._dropout_rng = torch.Generator().manual_seed(config.seed + 1).get_state()

        self.step = 0
        self.history: list[dict] = []
        self.elapsed = 0.0  # seconds of training (steps and their observers' work), kept across runs
        self.times = StepTimes()
        self._stop = threading.Event()
        self.running = False  # between a run's start and its final event (a driver such as ZeroGPU's sets it too)

    # ------------------------------------------------------------------ public API

    def stop(self) -> None:
        """Ask run() to finish after the current step (thread-safe); the weights are kept.
        A step still waiting for its turn does not wait any longer."""
        self._stop.set()
        for observer in self.observers:
            observer.on_stop(self)

    def run(self, until: int | None = None) -> Iterator[TrainEvent]:
        """Train from `self.step` up to `until` steps (default max_iters), yielding events."""
        until = self.config.max_iters if until is None else until
        if not isinstance(until, int) or until < 0:
            raise ValueError(f"until must be a non-negative integer, got {until!r}")
        self._stop.clear()
        self._remember_start()
        event, self.running = None, True
        try:
            with contextlib.ExitStack() as running:
                for observer in self.observers:
                    running.enter_context(observer.running(self))
                while self.step < until and not self._stop.is_set():
                    asked = time.perf_counter()
                    with self._turn(first=event is None) as granted:  # a run's first step jumps the queue
                        if not granted or self._stop.is_set():
                            break
                        self.times.waited = time.perf_counter() - asked
                        event = self.train_step(until)
                    if event.error:
                        break
                    yield event  # never while holding a turn: the caller may take its time
        finally:  # also when the caller drops the run midway
            self.running = False
        yield self.final_event(event, until)

    def train_step(self, until: int | None = None) -> TrainEvent:
        """One step of run(), without its turn: the update, the guard, the evaluation when due (every
        `eval_interval` steps and at `until`, default max_iters), the history row and the observers'
        additions. Stepping a trainer with this alone gives run()'s curve."""
        until = self.config.max_iters if until is None else until
        cfg = self.config
        self.times.began = time.perf_counter()
        lr = learning_rate_at(self.step, cfg.learning_rate, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters)
        loss, grad_norm = self.update(self, *self.batch(), lr)
        if not (math.isfinite(loss) and math.isfinite(grad_norm)) or loss > self._loss_ceiling:
            return self._diverged(loss, grad_norm, lr, until)
        self.step += 1
        self.times.updated = time.perf_counter()

        val_loss = None
        if self.step == until or self.step % cfg.eval_interval == 0:
            val_loss = self.estimate_loss(("val",))["val"]  # the events report validation loss only
            if self._sound(val_loss, self._good_loss):
                self._remember(val_loss)
        self.history.append({"step": self.step, "train_loss": loss, "val_loss": val_loss, "lr": lr})
        event = TrainEvent(step=self.step, max_iters=until, train_loss=loss, val_loss=val_loss, lr=lr)
        for observer in self.observers:
            observer.on_step(self, event)
        self.elapsed += time.perf_counter() - self.times.began
        event.elapsed = self.elapsed
        self.times.waited = 0.0  # counted once: a step taken outside run() waits for no turn
        return event

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next training batch (inputs, targets) of the whole `batch_size`, from the trainer's generator."""
        return self._batch(self.train_data, self._batch_rng, self.counted)

    def gradient_step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> tuple[float, float]:
        """The default `update`: one AdamW step at learning rate `lr` on the global batch (x, y) (gradient
        accumulation, DDP's average, clipping); returns the batch's loss and the gradient norm before
        clipping, in one host sync."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss = self._accumulate_gradients(x, y)
        # With clipping off, an infinite bound still returns the norm the guard needs.
        grad_norm = torch.nn.utils.clip_grad_norm_(self._params, self.config.grad_clip or math.inf)
        self.optimizer.step()  # a diverged step is undone by the guard: the weights go back, the moments go
        self.optimizer.zero_grad(set_to_none=True)
        loss_value, norm_value = torch.stack([loss, grad_norm.float()]).tolist()
        return loss_value, norm_value

    def final_event(self, last: TrainEvent | None, until: int) -> TrainEvent:
        """The done=True event of a run whose last step's event was `last` (None: no step): that step's
        figures (or the state so far) plus how it ended."""
        if last is not None and last.error:
            last.done = True
            return last
        row = self.history[-1] if self.history else {"train_loss": float("nan"), "lr": 0.0}
        val_loss = self.history[-1]["val_loss"] if self.history and last is not None else None
        return TrainEvent(
            step=self.step, max_iters=until, train_loss=row["train_loss"], val_loss=val_loss, lr=row["lr"],
            tokens_per_sec=last.tokens_per_sec if last else 0.0, elapsed=self.elapsed,
            eta=last.eta if last else 0.0, done=True, stopped=self.step < until,
        )

    @torch.no_grad()
    def estimate_loss(self, splits: tuple[str, ...] = ("train", "val")) -> dict[str, float]:
        """Mean loss on `eval_iters` fixed batches of each split; the model keeps its mode. Under DDP
        the processes share the batches out and every one gets the mean."""
        was_training = self.model.training
        self.model.eval()
        losses = {}
        for split in splits:
            data = {"train": self.train_data, "val": self.val_data}[split]
            rng = torch.Generator().manual_seed(self.config.seed + 2)  # the same batches every time
            total = torch.zeros((), device=self.device)
            for i in range(self.config.eval_iters):
                x, y = self._batch(data, rng, self.counted)  # every process draws every batch: rng in step
                if i % self.processes.world_size == self.processes.rank:  # and scores its own
                    with self.autocast():
                        total += self.forward(x, y)[1].float()
            losses[split] = self.processes.sum(total).item() / self.config.eval_iters
        self.model.train(was_training)
        return losses

    def state_dict(self) -> dict:
        """Everything beyond the weights that a resumed run needs to continue identically (a copy)."""
        return {
            "step": self.step,
            "elapsed": self.elapsed,
            "history": [dict(row) for row in self.history],
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),  # not live views of the moments
            "batch_rng": self._batch_rng.get_state(),
            "dropout_rng": self._dropout_rng.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Go on from a `state_dict()` (this trainer's, another's, or one saved in a checkpoint).

        A state that does not fit this model (other parameter shapes, damaged random states) is a
        ValueError, raised before anything changes.
        """
        self._check_state(state)
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self._batch_rng.set_state(state["batch_rng"])
        self._dropout_rng = state["dropout_rng"].clone()
        self.step = int(state["step"])
        self.elapsed = float(state["elapsed"])
        self.history[:] = [dict(row) for row in state["history"]]  # in place: whoever holds the curve sees it
        self._remember_start()  # a divergence goes back here at worst, also for a caller of train_step()

    def _check_state(self, state: dict) -> None:
        saved_groups = state["optimizer"]["param_groups"]
        ours = self.optimizer.param_groups
        if [len(g["params"]) for g in saved_groups] != [len(g["params"]) for g in ours]:
            raise ValueError("the training state belongs to a model with other parameters; it cannot continue this one")
        # state_dict() numbers parameters group by group; map those numbers onto our parameters
        params = dict(zip((i for g in saved_groups for i in g["params"]), (p for g in ours for p in g["params"])))
        for index, moments in state["optimizer"]["state"].items():
            if index not in params or not {"step", "exp_avg", "exp_avg_sq"} <= set(moments):
                raise ValueError(f"the training state's optimizer entry {index} is incomplete or unknown")
            for key in ("exp_avg", "exp_avg_sq"):
                if moments[key].shape != params[index].shape:
                    raise ValueError(
                        f"the training state has a moment of shape {tuple(moments[key].shape)} for a parameter "
                        f"of shape {tuple(params[index].shape)}: it belongs to another model"
                    )
        for name in ("batch_rng", "dropout_rng"):
            try:
                torch.Generator().set_state(state[name])
            except (RuntimeError, TypeError) as error:
                raise ValueError(f"the training state's {name} is not a random-generator state ({error})") from None

    # ------------------------------------------------------------------ one step

    def _accumulate_gradients(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Leave the gradient of the global batch (x, y)'s mean loss in the parameters, and return that
        loss: this process's rows of the batch, one micro-batch at a time, then DDP's average."""
        # The batch's loss is the mean over its counted targets (all, or the answers alone: then some
        # rows count more than others): each micro-batch's mean weighs by its part of those targets.
        counted, total = (y >= 0).sum(), torch.zeros((), device=self.device)
        micro_batches = list(zip(x[self._rows].split(self.micro_batch), y[self._rows].split(self.micro_batch)))
        self.model.train()
        with self._private_dropout_rng():
            for i, (xs, ys) in enumerate(micro_batches):
                sync = i == len(micro_batches) - 1 or not self.processes.distributed  # average once, at the end
                with contextlib.nullcontext() if sync else self._train_forward.no_sync():
                    with self.autocast():
                        loss = self._training_loss(xs, ys)
                    weight = (ys >= 0).sum() / counted
                    (loss * weight * self.processes.world_size).backward()  # DDP divides the sum by this
                total += loss.detach().float() * weight
        return self.processes.sum(total)  # the whole batch's loss, the same in every process

    def _training_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The training forward pass: the loss of (x, y), through DDP, or replayed from CUDA graphs
        (`cuda_graphs`: captured here at the first call, with torch's RNG states as they were, so that the
        first step's dropout is the one an uncaptured step would draw)."""
        if not self.config.cuda_graphs:
            return self._train_forward(x, y)[1]
        if self._graphed_loss is None:
            with torch.random.fork_rng(devices=[self.device]):
                self._graphed_loss = torch.cuda.make_graphed_callables(
                    TrainingLoss(self.model), (x, y), allow_unused_input=True)
        return self._graphed_loss(x, y)

    def _diverged(self, loss_value: float, norm_value: float, lr: float, until: int) -> TrainEvent:
        """Stop on a non-finite or exploded loss or gradient norm; go back to the last good weights."""
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_copy_(self._params, self._good)
        # AdamW's moments were accumulated on the diverging path: kept, they would push the
        # restored weights straight back the way they went.
        self.optimizer.state.clear()
        diverged_at, self.step = self.step + 1, self._good_step
        self.history[:] = [row for row in self.history if row["step"] <= self.step]
        what = (f"gradient norm became {norm_value:.3g}" if math.isfinite(loss_value) and not math.isfinite(norm_value)
                else f"loss became {loss_value:.3g}")
        where = ("where this run started" if self._good_loss is None else
                 f"the last evaluation with a sound validation loss ({self._good_loss:.3g})")
        return TrainEvent(
            step=self.step, max_iters=until, train_loss=loss_value, val_loss=None, lr=lr, elapsed=self.elapsed,
            error=(f"Training diverged at step {diverged_at} ({what}, learning rate {lr:.3g}). The weights were "
                   f"restored to step {self.step}, {where}; the optimizer's state was reset. "
                   "Try a smaller learning rate or a stronger gradient clip."),
        )

    def _sound(self, val_loss: float, reference: float | None) -> bool:
        """Whether weights with this validation loss are good ones to go back to after a divergence.

        Finite is not enough: a learning rate far too high wrecks the weights several steps before
        anything overflows. So the loss must also stay within 1.5 x that of the last good weights
        (`reference`) plus 1, or, with none known, 1.5 x ln(vocab_size) plus 1 (guessing uniformly
        scores ln(vocab_size)); the 1 nat of slack keeps the noise of small losses from freezing the
        snapshot. A drift upwards beyond that (overfitting) keeps the earlier, better weights.
        """
        expected = math.log(self.model.config.vocab_size) if reference is None else reference
        return math.isfinite(val_loss) and val_loss <= 1.5 * expected + 1

    def _remember_start(self) -> None:
        """Keep the weights a run (or a loaded state) starts from; the loss recorded at this step, if
        sound, is the bar for better ones."""
        last = self.history[-1] if self.history else {}
        known = last.get("val_loss") if last.get("step") == self.step else None
        self._remember(known if known is not None and self._sound(known, None) else None)

    def _remember(self, val_loss: float | None) -> None:
        """Keep the current weights as the good ones (copied into the one snapshot)."""
        with torch.no_grad():
            torch._foreach_copy_(self._good, self._params)
        self._good_step, self._good_loss = self.step, val_loss

    # ------------------------------------------------------------------ helpers

    @contextlib.contextmanager
    def _turn(self, first: bool) -> Iterator[bool]:
        """Every observer's turn held at once (granted only if each one grants it)."""
        with contextlib.ExitStack() as turns:
            for observer in self.observers:
                if not turns.enter_context(observer.turn(self, first)):
                    yield False
                    return
            yield True

    def _batch(self, data: torch.Tensor, rng: torch.Generator,
               answers: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        # The generator is a CPU one on every device; indexing a device tensor with it is fine.
        return get_batch(data, self.config.batch_size, self.model.config.block_size, rng, answers)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision this trainer's forward passes run in (bfloat16 autocast where `dtype` chose it)."""
        # CUDA graphs capture the casts of the weights: autocast must not keep them between passes.
        return precision(self.model, self.device, self._amp_dtype, cache=not self.config.cuda_graphs)

    @contextlib.contextmanager
    def _private_dropout_rng(self):
        if self.model.config.dropout == 0:
            yield
            return
        if self.processes.distributed:  # see the module docstring
            rng = torch.Generator().set_state(self._dropout_rng)
            seed = int(torch.randint(2**62, (), generator=rng))
            self._dropout_rng = rng.get_state()
            with seeded(seed + self.processes.rank, self.device):
                yield
            return
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._dropout_rng)
            yield
            self._dropout_rng = torch.get_rng_state()



@contextlib.contextmanager
def precision(model: GPT, device: torch.device, amp_dtype: torch.dtype | None, cache: bool = True) -> Iterator[None]:
    """Forward passes of `model` on `device` under autocast to `amp_dtype` (None: plain float32); `cache`:
    autocast's cache of cast weights within the block."""
    if amp_dtype is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.autocast(device.type, dtype=amp_dtype, cache_enabled=cache))
        if device.type == "cpu":
            # PyTorch's CPU flash-attention backward is ~4x slower in bfloat16 than in float32;
            # the explicit matmul-softmax-matmul path is faster than any fused kernel here
            # (measured: tests/bench/README.md).
            stack.enter_context(model.explicit_attention())
        yield


class TrainingLoss(torch.nn.Module):
    """A model's training loss, (x, y) -> (), as a module of its own: what `cuda_graphs` captures, so that
    the model's own forward stays as it is for evaluations, samples and analyses."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.model(x, y)[1]
