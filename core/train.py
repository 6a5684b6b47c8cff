"""The training engine: a stoppable, resumable loop that streams one event per step.

    trainer = Trainer(model, data, TrainConfig(max_iters=500), tokenizer=tok)
    for event in trainer.run():          # a generator: the caller decides when to look
        print(event.step, event.train_loss)
    trainer.stop()                       # from any thread: ends run() after the current step

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

Sharing the CPU: trainings of one process given the same `core.schedule.FairShare` take turns
step by step, round-robin, so many of them advance together (a workshop server); the time spent
waiting for turns counts in the ETA.

Divergence guard: before every update the loss and the gradient norm are checked. A
non-finite value, or a training loss far above that of guessing uniformly, ends training with a
message; the weights go back to the last good ones (those at the start of the run or at the
latest evaluation with a sound validation loss, see `Trainer._sound`), and AdamW starts afresh.

Never imports checkpoints (the CLI saves them; a training state is a plain dict here), gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from core.attention import attention_maps
from core.data import TokenData, answer_mask, every_window_has_an_answer, get_batch
from core.config import TrainConfig
from core.device import autocast_dtype
from core.distributed import SINGLE, Processes, seeded
from core.model import GPT
from core.optim import configure_optimizer, learning_rate_at
from core.sample import answer_questions, generate
from core.schedule import FairShare
from core.tokenizers import Tokenizer

PROBE_TOKENS = 32  # length of the default attention probe (the start of the validation split)


@dataclass
class TrainEvent:
    """One per optimizer step, plus a final one with done=True (finished, stopped or diverged)."""

    step: int  # steps completed so far (1-based after the first step)
    max_iters: int
    train_loss: float
    val_loss: float | None  # set on evaluation steps only (and always on the last step)
    lr: float
    tokens_per_sec: float  # smoothed
    elapsed: float  # seconds of training so far (across runs)
    eta: float  # seconds left, estimated
    sample: str | None = None  # decoded fresh sample, on sample steps (needs a tokenizer)
    attention: list[torch.Tensor] | None = None  # per layer (H, T, T) for the probe prompt
    probe_ids: list[int] | None = None
    # On evaluation steps of a task corpus (TokenData.answer_tokens): loss and greedy accuracy on the
    # answer halves of validation lines, the part a model can learn; the random questions set a
    # floor under the whole-line loss that these do not have.
    answer_loss: float | None = None
    answer_accuracy: float | None = None
    done: bool = False
    stopped: bool = False
    error: str | None = None  # divergence message (weights restored to the last good ones)


class Trainer:
    """Trains `model` on `data` one step at a time; see the module docstring."""

    def __init__(
        self,
        model: GPT,
        data: TokenData,
        config: TrainConfig,
        *,
        tokenizer: Tokenizer | None = None,
        probe_text: str | None = None,
        share: FairShare | None = None,
        processes: Processes = SINGLE,
    ) -> None:
        self.config = config
        self.share = share
        self.processes = processes
        self.device = processes.device(config.device)
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
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
        self._counted = None
        if config.answers_only and every_window_has_an_answer(data, block_size):
            self._counted = data.answer_tokens
        self.probe_ids = self._probe_ids(probe_text)

        self.optimizer = configure_optimizer(
            model, config.learning_rate, config.weight_decay, (config.beta1, config.beta2)
        )
        self._amp_dtype = autocast_dtype(self.device, config.dtype)
        # The compiled module shares the parameters; hooks (attention snapshots) use the plain one.
        self._forward = torch.compile(model) if config.compile else model
        # Training's forward passes go through DDP, which averages the gradients across processes in
        # the backward pass; evaluations, samples and snapshots need no gradients and use the model.
        self._train_forward = self._forward if not processes.distributed else DistributedDataParallel(
            self._forward, device_ids=[self.device] if self.device.type == "cuda" else None)
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
        self.elapsed = 0.0
        self._stop = threading.Event()
        self.running = False  # between run()'s start and its final event
        self._seconds_per_step: float | None = None  # smoothed time of a bare step: tokens/s and the ETA
        self._extras = 0.0  # seconds spent on evaluations, samples and snapshots: the ETA spreads them out
        self._wait_per_step: float | None = None  # smoothed seconds a step waits for its turn (with a share)

    # ------------------------------------------------------------------ public API

    def stop(self) -> None:
        """Ask run() to finish after the current step (thread-safe); the weights are kept.
        A step still waiting for its turn does not wait any longer."""
        self._stop.set()
        if self.share is not None:
            self.share.withdraw(self)

    @contextlib.contextmanager
    def turn(self, first: bool = False) -> Iterator[bool]:
        """Hold one of the share's turns for work on this model outside run() (a sample, a
        snapshot); yields False if the trainer was stopped while waiting. Always granted alone.
        A `first` turn goes ahead of the others (see FairShare.turn)."""
        if self.share is None:
            yield True
            return
        with self.share.turn(self, first) as granted:
            yield granted

    def run(self, until: int | None = None) -> Iterator[TrainEvent]:
        """Train from `self.step` up to `until` steps (default max_iters), yielding events."""
        until = self.config.max_iters if until is None else until
        if not isinstance(until, int) or until < 0:
            raise ValueError(f"until must be a non-negative integer, got {until!r}")
        self._stop.clear()
        # Start from these weights; the loss this step recorded (if sound) is the bar for better ones.
        last = self.history[-1] if self.history else {}
        known = last.get("val_loss") if last.get("step") == self.step else None
        self._remember(known if known is not None and self._sound(known, None) else None)
        event, self.running = None, True
        try:
            with self.share.membership(self) if self.share is not None else contextlib.nullcontext():
                while self.step < until and not self._stop.is_set():
                    asked = time.perf_counter()
                    with self.turn(first=event is None) as granted:  # a run's first step jumps the queue
                        if not granted or self._stop.is_set():
                            break
                        waited, previous = time.perf_counter() - asked, self._wait_per_step
                        self._wait_per_step = waited if previous is None else 0.9 * previous + 0.1 * waited
                        event = self._train_step(until)
                    if event.error:
                        break
                    yield event  # never while holding a turn: the caller may take its time
        finally:  # also when the caller drops the run midway
            self.running = False
        yield self._final_event(event, until)

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
                x, y = self._batch(data, rng, self._counted)  # every process draws every batch: rng in step
                if i % self.processes.world_size == self.processes.rank:  # and scores its own
                    with self._autocast():
                        total += self._forward(x, y)[1].float()
            losses[split] = self.processes.sum(total).item() / self.config.eval_iters
        self.model.train(was_training)
        return losses

    @torch.no_grad()
    def answer_score(self, max_windows: int = 64) -> tuple[float, float] | None:
        """(loss, greedy accuracy) on the answer targets of the first `max_windows` non-overlapping
        context windows of the validation split, those whose question is in the same window
        (`answer_mask`); None for a corpus without answers (see TokenData.answer_tokens)."""
        if self.answer_tokens is None:
            return None
        T = self.model.config.block_size
        n = min(max_windows, (len(self.val_data) - 1) // T)
        x, y = self.val_data[: n * T].view(n, T), self.val_data[1: n * T + 1].view(n, T)
        answers = answer_mask(x, *self.answer_tokens)
        if not answers.any():
            return None
        was_training = self.model.training
        self.model.eval()
        with self._autocast():
            logits = self._forward(x)[0].float()
        self.model.train(was_training)
        losses = F.cross_entropy(logits[answers], y[answers], reduction="none")
        right = logits[answers].argmax(-1) == y[answers]
        return losses.mean().item(), right.float().mean().item()

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

    def _train_step(self, until: int) -> TrainEvent:
        cfg = self.config
        started = time.perf_counter()
        lr = learning_rate_at(self.step, cfg.learning_rate, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss = self._accumulate_gradients(*self._batch(self.train_data, self._batch_rng, self._counted))
        # With clipping off, an infinite bound still returns the norm the guard needs.
        grad_norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.grad_clip or math.inf)
        # One host sync per step: the loss the event reports and the divergence check.
        loss_value, norm_value = torch.stack([loss, grad_norm.float()]).tolist()
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)) or loss_value > self._loss_ceiling:
            return self._diverged(loss_value, norm_value, lr, until)

        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        trained = time.perf_counter()
        self._smooth(trained - started)

        last = self.step == until
        val_loss, answers = None, None
        if last or self.step % cfg.eval_interval == 0:
            val_loss = self.estimate_loss(("val",))["val"]  # the events report validation loss only
            answers = self.answer_score()
            if self._sound(val_loss, self._good_loss):
                self._remember(val_loss)
        row = {"step": self.step, "train_loss": loss_value, "val_loss": val_loss, "lr": lr}
        if answers is not None:
            row["answer_loss"], row["answer_accuracy"] = answers
        self.history.append(row)
        event = self._event(loss_value, val_loss, lr, until)
        event.answer_loss, event.answer_accuracy = answers or (None, None)
        if self._due(cfg.sample_interval, last) and self.tokenizer is not None:
            event.sample = self.sample()
        if self._due(cfg.attention_interval, last):
            event.attention = self.probe_attention()
            event.probe_ids = self.probe_ids
        finished = time.perf_counter()
        self._extras += finished - trained
        self.elapsed += finished - started
        event.elapsed, event.tokens_per_sec, event.eta = self.elapsed, self._tokens_per_sec(), self._eta(until)
        return event

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
                    with self._autocast():
                        _, loss = self._train_forward(xs, ys)
                    weight = (ys >= 0).sum() / counted
                    (loss * weight * self.processes.world_size).backward()  # DDP divides the sum by this
                total += loss.detach().float() * weight
        return self.processes.sum(total)  # the whole batch's loss, the same in every process

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
        event = self._event(loss_value, None, lr, until)
        event.error = (
            f"Training diverged at step {diverged_at} ({what}, learning rate {lr:.3g}). The weights were "
            f"restored to step {self.step}, {where}; the optimizer's state was reset. "
            "Try a smaller learning rate or a stronger gradient clip."
        )
        return event

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

    def _remember(self, val_loss: float | None) -> None:
        """Keep the current weights as the good ones (copied into the one snapshot)."""
        with torch.no_grad():
            torch._foreach_copy_(self._good, self._params)
        self._good_step, self._good_loss = self.step, val_loss

    def _final_event(self, last: TrainEvent | None, until: int) -> TrainEvent:
        """The done=True event: the last step's figures (or the state so far) plus how it ended."""
        if last is not None and last.error:
            last.done = True
            return last
        row = self.history[-1] if self.history else {"train_loss": float("nan"), "lr": 0.0}
        val_loss = self.history[-1]["val_loss"] if self.history and last is not None else None
        event = self._event(row["train_loss"], val_loss, row["lr"], until)
        event.done = True
        event.stopped = self.step < until
        return event

    # ------------------------------------------------------------------ helpers

    def _batch(self, data: torch.Tensor, rng: torch.Generator,
               answers: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        # The generator is a CPU one on every device; indexing a device tensor with it is fine.
        return get_batch(data, self.config.batch_size, self.model.config.block_size, rng, answers)

    @contextlib.contextmanager
    def _autocast(self):
        if self._amp_dtype is None:
            yield
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.autocast(self.device.type, dtype=self._amp_dtype))
            if self.device.type == "cpu":
                # PyTorch's CPU flash-attention backward is ~4x slower in bfloat16 than in float32;
                # the explicit matmul-softmax-matmul path is faster than any fused kernel here
                # (measured: tests/bench/README.md).
                stack.enter_context(self.model.explicit_attention())
            yield

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

    def _due(self, interval: int, last: bool) -> bool:
        return interval > 0 and (last or self.step % interval == 0)

    def _probe_ids(self, probe_text: str | None) -> list[int]:
        block_size = self.model.config.block_size
        if probe_text:
            if self.tokenizer is None:
                raise ValueError("probe_text needs a tokenizer")
            return self.tokenizer.encode(probe_text)[-block_size:]
        return self.val_data[: min(PROBE_TOKENS, block_size)].tolist()

    def sample(self) -> str:
        """A fresh sample of about `sample_tokens` tokens (needs a tokenizer): from the probe's first
        token; or, trained on answers alone (which never teach the questions), the model's answers
        to validation questions, one line each."""
        rng = torch.Generator(device=self.device).manual_seed(self.config.seed + self.step)
        if self._counted is not None:
            head = self.val_data[: self.config.sample_tokens * 2].tolist()  # enough for a few lines
            return answer_questions(self.model, self.tokenizer, head, self.answer_tokens, self.config.sample_tokens,
                                    generator=rng)
        prompt = torch.tensor([self.probe_ids[:1]], device=self.device)
        ids = generate(self.model, prompt, self.config.sample_tokens, generator=rng)
        return self.tokenizer.decode(ids[0].tolist())

    def probe_attention(self) -> list[torch.Tensor]:
        """Per layer (H, T, T) attention of the probe prompt; none for stages without attention."""
        if not self.model.config.use_attention or not self.model.blocks:
            return []
        return list(attention_maps(self.model, self.probe_ids))

    def _event(self, train_loss: float, val_loss: float | None, lr: float, until: int) -> TrainEvent:
        return TrainEvent(
            step=self.step, max_iters=until, train_loss=train_loss, val_loss=val_loss, lr=lr,
            tokens_per_sec=self._tokens_per_sec(), elapsed=self.elapsed, eta=self._eta(until),
        )

    def _smooth(self, duration: float) -> None:
        previous = self._seconds_per_step
        self._seconds_per_step = duration if previous is None else 0.9 * previous + 0.1 * duration

    def _tokens_per_sec(self) -> float:
        if not self._seconds_per_step:
            return 0.0
        return self.config.batch_size * self.model.config.block_size / self._seconds_per_step

    def _eta(self, until: int) -> float:
        extras_per_step = self._extras / self.step if self.step else 0.0
        per_step = (self._seconds_per_step or 0.0) + extras_per_step + (self._wait_per_step or 0.0)
        return max(0, until - self.step) * per_step


