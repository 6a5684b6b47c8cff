"""Observers of a training run: what paces the loop or adds to its events without being the loop.

    trainer = Trainer(model, data, config, observers=standard(config, tokenizer=tok, share=share))
    for event in trainer.run(): ...      # each event as the observers filled it in

- `Turns(share)`: each step waits for a turn of a shared `core.schedule.FairShare` (a workshop server),
  the training counts among the share's members while it runs, and Stop lets a waiting step go.
- `AnswerScore()`: on evaluation steps of a task corpus, the loss and greedy accuracy on the answers.
- `Samples(tokenizer, every)`: a fresh sample every `every` steps; `sample(trainer)` at any time.
- `AttentionProbe(every)`: the attention of the probe prompt every `every` steps; `attention(trainer)` at any time.
- `Timing()`: tokens/s and the time left, which counts the waits for turns and the work of the observers
  before it (evaluations, samples, snapshots, spread over the steps); it goes last.

`standard(config, ...)` lists the ones a TrainConfig asks for (`sample_interval`, `attention_interval`).
Trainer.run holds every observer's turn around a step and its observers' work, so on a shared server a
sample or a snapshot takes its turn like a step; a caller that samples between steps (the app, by the
clock) takes a turn of the share itself. Samples draw from their own generator, seeded from the config
and the step: nothing here draws from torch's global RNG.

Imports the loop it watches (core.train), attention, data, sample and schedule; core.train never imports this.
Never imports gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch.nn import functional as F

from core.attention import attention_maps
from core.config import TrainConfig
from core.data import answer_mask
from core.sample import answer_questions, generate
from core.schedule import FairShare
from core.tokenizers import Tokenizer
from core.train import Observer, Trainer, TrainEvent

PROBE_TOKENS = 32  # length of the default attention probe (the start of the validation split)


def standard(config: TrainConfig, *, tokenizer: Tokenizer | None = None, share: FairShare | None = None,
             probe_ids: list[int] | None = None) -> list[Observer]:
    """The observers a run with `config` reports through: turns of `share` (if any), answer scores, samples
    every `sample_interval` steps (with a tokenizer), attention every `attention_interval`, and Timing last."""
    observers: list[Observer] = [] if share is None else [Turns(share)]
    observers.append(AnswerScore())
    if config.sample_interval and tokenizer is not None:
        observers.append(Samples(tokenizer, every=config.sample_interval))
    if config.attention_interval:
        observers.append(AttentionProbe(every=config.attention_interval, ids=probe_ids))
    observers.append(Timing())
    return observers


def due(every: int, event: TrainEvent) -> bool:
    """Whether an observer working every `every` steps (0: never) works on this step: also on the run's last."""
    return every > 0 and (event.step == event.max_iters or event.step % every == 0)


def default_probe(trainer: Trainer) -> list[int]:
    """The probe prompt when none is given: the validation split's first PROBE_TOKENS tokens (at most a context)."""
    return trainer.val_data[: min(PROBE_TOKENS, trainer.model.config.block_size)].tolist()


class Turns(Observer):
    """Steps taken in turns of `share`, round-robin with the other trainings sharing it (core.schedule)."""

    def __init__(self, share: FairShare) -> None:
        self.share = share

    def running(self, trainer: Trainer) -> contextlib.AbstractContextManager:
        return self.share.membership(trainer)

    def turn(self, trainer: Trainer, first: bool) -> contextlib.AbstractContextManager[bool]:
        return self.share.turn(trainer, first)  # a run's first step goes ahead of the queue

    def on_stop(self, trainer: Trainer) -> None:
        self.share.withdraw(trainer)


class Timing(Observer):
    """Tokens per second (of the bare update, smoothed) and the time left: steps left x (an update, plus
    the observers' work spread over the steps so far, plus the smoothed wait for a turn)."""

    def __init__(self) -> None:
        self.seconds_per_step: float | None = None  # smoothed time of a bare update
        self.extras = 0.0  # seconds of evaluations and the work of the observers before this one
        self.wait_per_step: float | None = None  # smoothed seconds a step waits for its turn

    def on_step(self, trainer: Trainer, event: TrainEvent) -> None:
        times = trainer.times
        self.seconds_per_step = _smooth(self.seconds_per_step, times.updated - times.began)
        self.wait_per_step = _smooth(self.wait_per_step, times.waited)
        self.extras += time.perf_counter() - times.updated
        event.tokens_per_sec = self.tokens_per_sec(trainer)
        event.eta = self.eta(trainer, event.max_iters)

    def tokens_per_sec(self, trainer: Trainer) -> float:
        if not self.seconds_per_step:
            return 0.0
        return trainer.config.batch_size * trainer.model.config.block_size / self.seconds_per_step

    def eta(self, trainer: Trainer, until: int) -> float:
        """Seconds left until step `until`, estimated."""
        extras_per_step = self.extras / trainer.step if trainer.step else 0.0
        per_step = (self.seconds_per_step or 0.0) + extras_per_step + (self.wait_per_step or 0.0)
        return max(0, until - trainer.step) * per_step


def _smooth(previous: float | None, value: float) -> float:
    return value if previous is None else 0.9 * previous + 0.1 * value


class AnswerScore(Observer):
    """On evaluation steps, `answer_score` in the event and the step's history row (a corpus with answers only)."""

    def __init__(self, max_windows: int = 64) -> None:
        self.max_windows = max_windows

    def on_step(self, trainer: Trainer, event: TrainEvent) -> None:
        if event.val_loss is None:
            return
        scored = answer_score(trainer, self.max_windows)
        if scored is not None:
            event.answer_loss, event.answer_accuracy = scored
            trainer.history[-1]["answer_loss"], trainer.history[-1]["answer_accuracy"] = scored


@torch.no_grad()
def answer_score(trainer: Trainer, max_windows: int = 64) -> tuple[float, float] | None:
    """(loss, greedy accuracy) on the answer targets of the first `max_windows` non-overlapping
    context windows of the validation split, those whose question is in the same window
    (`answer_mask`); None for a corpus without answers (see TokenData.answer_tokens)."""
    if trainer.answer_tokens is None:
        return None
    model, val = trainer.model, trainer.val_data
    T = model.config.block_size
    n = min(max_windows, (len(val) - 1) // T)
    x, y = val[: n * T].view(n, T), val[1: n * T + 1].view(n, T)
    answers = answer_mask(x, *trainer.answer_tokens)
    if not answers.any():
        return None
    was_training = model.training
    model.eval()
    with trainer.autocast():
        logits = trainer.forward(x)[0].float()
    model.train(was_training)
    losses = F.cross_entropy(logits[answers], y[answers], reduction="none")
    right = logits[answers].argmax(-1) == y[answers]
    return losses.mean().item(), right.float().mean().item()


class Samples(Observer):
    """A fresh sample of about `sample_tokens` tokens every `every` steps (0: only when asked, `sample`)."""

    def __init__(self, tokenizer: Tokenizer, every: int = 0) -> None:
        self.tokenizer, self.every = tokenizer, every

    def on_step(self, trainer: Trainer, event: TrainEvent) -> None:
        if due(self.every, event):
            event.sample = self.sample(trainer)

    def sample(self, trainer: Trainer) -> str:
        """From the first token of the validation split; or, trained on answers alone (which never teach
        the questions), the model's answers to validation questions, one line each. Seeded by the
        config's seed and the step: the same model gives the same sample."""
        config = trainer.config
        rng = torch.Generator(device=trainer.device).manual_seed(config.seed + trainer.step)
        if trainer.counted is not None:
            head = trainer.val_data[: config.sample_tokens * 2].tolist()  # enough for a few lines
            return answer_questions(trainer.model, self.tokenizer, head, trainer.answer_tokens, config.sample_tokens,
                                    generator=rng)
        prompt = trainer.val_data[:1].view(1, 1)
        ids = generate(trainer.model, prompt, config.sample_tokens, generator=rng)
        return self.tokenizer.decode(ids[0].tolist())


class AttentionProbe(Observer):
    """Per layer (H, T, T) attention of the probe prompt (`ids`, at most a context; default `default_probe`)
    every `every` steps (0: only when asked, `attention`)."""

    def __init__(self, every: int = 0, ids: list[int] | None = None) -> None:
        self.every, self.ids = every, ids

    def on_step(self, trainer: Trainer, event: TrainEvent) -> None:
        if due(self.every, event):
            event.attention, event.probe_ids = self.attention(trainer), self.probe_ids(trainer)

    def probe_ids(self, trainer: Trainer) -> list[int]:
        if self.ids is None:
            return default_probe(trainer)
        return list(self.ids[-trainer.model.config.block_size:])

    def attention(self, trainer: Trainer) -> list[torch.Tensor]:
        """Per layer (H, T, T) attention of the probe; none for stages without attention."""
        model = trainer.model
        if not model.config.use_attention or not model.blocks:
            return []
        return list(attention_maps(model, self.probe_ids(trainer)))
