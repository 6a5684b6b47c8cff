"""The seeds' ladder: every stage from the bigram to the GPT, trained in turn at the lecture's sizes.

Karpathy's "Let's build GPT" adds one idea at a time to a bigram model and prints the validation
loss after each: communication (attention) and computation (feed-forward) each lower it, and
residual connections with LayerNorm let blocks stack. `Ladder` retraces that on Tiny Shakespeare,
then climbs one rung past the lecture: today's parts (`RUNGS["llama"]`) at the same sizes.

    ladder = Ladder.from_text(load_shakespeare(), steps=10_000, seed=1337)
    for event in ladder.climb():          # every training step of every rung, in order
        if event.rung:                    # a rung is finished
            print(event.rung.stage, event.rung.val_loss, RUNGS[event.rung.stage].lecture_loss)

Every rung starts from the same seed and sees the same batches; only the model differs.
From the command line: `python -m core ladder --steps 10000 --seed 1337 --json`.

Never imports gradio, plotly or `playground`: the Ladder tab and the CLI both drive `Ladder.climb()`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from core.config import LLAMA_PARTS, STAGES, GPTConfig, Stage, TrainConfig
from core.data import TokenData, default_tokenizer
from core.model import GPT
from core.observers import standard
from core.schedule import FairShare
from core.tokenizers import Tokenizer
from core.train import TrainEvent, Trainer

# The lecture's sizes: n_embd 32 in 4 heads, three blocks for the residual rung (the earlier rungs
# are one layer by their stage), ReLU, no bias on query, key and value. Context 32, not the video's
# 8: the figures it reaches are the same or better, and attention has something to look at.
LECTURE_MODEL = dict(block_size=32, n_embd=32, n_head=4, n_layer=3, dropout=0.0, qkv_bias=False, activation="relu")
# The lecture's optimizer: AdamW with PyTorch's defaults at a constant learning rate.
LECTURE_TRAIN = dict(batch_size=16, learning_rate=1e-3, min_lr=1e-3, warmup_iters=0, weight_decay=0.01,
                     beta1=0.9, beta2=0.999, grad_clip=0.0, eval_iters=200, dtype="float32")
DEFAULT_STEPS = 10_000
# The schedules a climb may take: the lecture's constant rate needs its 10,000 steps (here) for
# attention to pay; a climb of a few thousand steps (the app's default: 3,000) needs a higher peak,
# with nanoGPT's cosine decay to a tenth. At 3,000 steps with the lecture's rate one head ended
# above the bigram on seed 1337; with "short" every rung with attention beats the one before by
# 0.062 or more on each of 5 seeds (tests/bench/README.md).
SCHEDULES: dict[str, dict] = {
    "lecture": {},
    "short": dict(learning_rate=3e-3, min_lr=3e-4),
}
# The rungs: the seeds' stages, then the GPT with today's parts. Not a stage of the Train form, where
# the same parts are the Modern parts options of any stage.
RUNGS: dict[str, Stage] = {
    **STAGES,
    "llama": Stage(
        "+ today's parts (Llama-style)",
        "rotary positions, RMSNorm and a SwiGLU feed-forward, as Llama builds a block: lower again, at the same size.",
        {**STAGES["gpt"].options, **LLAMA_PARTS}, None,
    ),
}
CURVE_POINTS = 20  # validation estimates per rung: the curves the app overlays


def ladder_configs(stage: str, vocab_size: int, steps: int = DEFAULT_STEPS, seed: int = 1337, *,
                   eval_iters: int = LECTURE_TRAIN["eval_iters"], device: str = "auto",
                   schedule: dict | None = None) -> tuple[GPTConfig, TrainConfig]:
    """One rung's model and training configs at the lecture's sizes; `schedule` overrides the
    lecture's learning rates (`learning_rate`, `min_lr`: a cosine decay from one to the other)."""
    unknown = set(schedule or {}) - {"learning_rate", "min_lr"}
    if unknown:
        raise ValueError(f"a schedule sets learning_rate and min_lr, not {sorted(unknown)}")
    if stage not in RUNGS:
        raise ValueError(f"stage must be one of {list(RUNGS)}, got {stage!r}")
    model = GPTConfig(**{**LECTURE_MODEL, "vocab_size": vocab_size, **RUNGS[stage].options})
    train = TrainConfig(**{**LECTURE_TRAIN, **(schedule or {}), "eval_iters": eval_iters}, max_iters=steps,
                        lr_decay_iters=steps,
                        eval_interval=max(1, steps // CURVE_POINTS), seed=seed, device=device)
    return model, train


@dataclass
class Rung:
    """One finished (or stopped) rung: its final validation loss and its validation curve."""

    stage: str
    params: int
    val_loss: float
    seconds: float  # of its own training, waits for turns on a shared server excluded
    steps: int
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    stopped: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class LadderEvent:
    """One training step of rung `index` (of `total`); `rung` is set on the rung's last event."""

    stage: str
    index: int
    total: int
    event: TrainEvent
    curve: list[tuple[int, float]]  # this rung's validation curve so far
    rung: Rung | None = None


def ladder_data(text: str) -> tuple[Tokenizer, TokenData]:
    """The characters of `text` as a tokenizer and split token ids: what every rung trains on
    (read-only, so several ladders may share them)."""
    tokenizer = default_tokenizer("char", text)
    return tokenizer, TokenData.from_text(text, tokenizer, LECTURE_MODEL["block_size"])


class Ladder:
    """Trains `stages` (default: all of them, in order) one after another on `data`."""

    def __init__(self, tokenizer: Tokenizer, data: TokenData, steps: int = DEFAULT_STEPS, seed: int = 1337, *,
                 stages: Sequence[str] = tuple(RUNGS), eval_iters: int = LECTURE_TRAIN["eval_iters"],
                 device: str = "auto", share: FairShare | None = None, schedule: dict | None = None) -> None:
        unknown = [stage for stage in stages if stage not in RUNGS]
        if unknown or not stages:
            raise ValueError(f"stages must be some of {list(RUNGS)}, got {list(stages)!r}")
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps!r}")
        self.stages = tuple(stages)
        self.steps, self.seed, self.eval_iters, self.device, self.share = steps, seed, eval_iters, device, share
        self.tokenizer, self.data = tokenizer, data
        self.schedule = dict(schedule or {})
        self.configs(self.stages[0])  # a wrong schedule fails here, not at the first rung
        self.rungs: list[Rung] = []
        self._trainer: Trainer | None = None
        self._stop = threading.Event()

    @classmethod
    def from_text(cls, text: str, steps: int = DEFAULT_STEPS, seed: int = 1337, **options) -> "Ladder":
        """A ladder on the characters of `text` (see `__init__` for the options)."""
        return cls(*ladder_data(text), steps, seed, **options)

    def configs(self, stage: str) -> tuple[GPTConfig, TrainConfig]:
        return ladder_configs(stage, self.tokenizer.vocab_size, self.steps, self.seed,
                              eval_iters=self.eval_iters, device=self.device, schedule=self.schedule)

    def stop(self) -> None:
        """End the rung in training after its current step, and climb no further (thread-safe)."""
        self._stop.set()
        trainer = self._trainer
        if trainer is not None:
            trainer.stop()

    def climb(self) -> Iterator[LadderEvent]:
        """Train each rung in turn, yielding every step; `self.rungs` fills as rungs finish."""
        try:
            for index, stage in enumerate(self.stages):
                if self._stop.is_set():
                    return
                yield from self._train_rung(index, stage)
        finally:  # also when the caller drops the climb: no model is kept alive by the ladder
            self._trainer = None

    def _train_rung(self, index: int, stage: str) -> Iterator[LadderEvent]:
        model_config, train_config = self.configs(stage)
        model = GPT(model_config, generator=torch.Generator().manual_seed(self.seed))
        observers = standard(train_config, share=self.share)
        self._trainer = trainer = Trainer(model, self.data, train_config, observers=observers)
        if self._stop.is_set():  # Stop came while the model was being built
            trainer.stop()
        curve: list[tuple[int, float]] = []
        for event in trainer.run():
            if event.val_loss is not None and not event.done:
                curve.append((event.step, event.val_loss))
            if not event.done:
                yield LadderEvent(stage, index, len(self.stages), event, curve)
                continue
            if event.error:  # a ValueError: the app shows it to the learner
                raise ValueError(f"The {RUNGS[stage].title} rung failed: {event.error}")
            rung = Rung(stage, model.parameter_counts()["total"], _final_loss(trainer, curve), trainer.elapsed,
                        trainer.step, curve, stopped=event.stopped)
            self.rungs.append(rung)
            yield LadderEvent(stage, index, len(self.stages), event, curve, rung)


def _final_loss(trainer: Trainer, curve: list[tuple[int, float]]) -> float:
    """The validation loss at the rung's last step (measured now if it stopped between estimates)."""
    if curve and curve[-1][0] == trainer.step:
        return curve[-1][1]
    loss = trainer.estimate_loss(("val",))["val"]
    curve.append((trainer.step, loss))
    return loss
