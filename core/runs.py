"""A session's last few training runs, kept side by side to compare: settings, curves, final attention.

    runs = RunLog()
    number = runs.new_number()                       # a new model's run
    runs.keep(RunRecord.of(number, model.config, "Tiny Shakespeare", trainer.history,
                           trainer.config.to_dict(), probe_labels, final_maps))
    runs.records                                     # oldest first, at most max_runs
    varying_fields(runs.records)                     # the settings that tell them apart

Continuing a run replaces its record (same number); a new run pushes the oldest out. Memory is
bounded whatever the run: curves are thinned to CURVE_POINTS and the attention (float16) is kept
only while it fits max_bytes // max_runs.

A log travels as safetensors bytes (`encode_runs`, `decode_runs`): the maps as tensors, the rest as
JSON metadata, every field checked on the way back (the state store keeps it beside a checkpoint).

Never imports the training loop (a run is recorded from plain values), gradio, plotly or `playground`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import torch

from core.attention import entropy_bits
from core.config import GPTConfig
from core.tensorfile import pack, unpack

RUNS_KEPT = 4
RUNS_BYTES = 2 * 2**20  # every kept run's attention together (sixty learners: 120 MiB at most)
# `encode_runs`' bytes at most: the maps, plus each run's curves (CURVE_POINTS training losses, and up to
# an evaluation a step) and settings as JSON
ENCODED_RUNS_BYTES = RUNS_BYTES + (8 << 20)
CURVE_POINTS = 600  # training-loss points kept per run: what a chart can show anyway
# The settings a comparison may differ in, as a label names them: model fields (GPTConfig), then
# training ones (TrainConfig). A switch reads "no causal mask" when off, an option left out "no window".
COMPARED = {
    "n_layer": "layers", "n_head": "heads", "n_embd": "channels", "block_size": "context", "dropout": "dropout",
    "position": "positions", "use_attention": "attention", "use_feed_forward": "feed-forward",
    "use_residual": "residual connections", "causal": "causal mask", "scale_attention": "√d scaling",
    "activation": "activation", "init": "init", "norm": "norm", "n_kv_head": "grouped key/value heads",
    "window": "window", "batch_size": "batch", "learning_rate": "learning rate",
    "seed": "seed", "weight_decay": "weight decay", "warmup_iters": "warmup", "grad_clip": "gradient clip",
}


TITLE_CHARS = 40  # of a run's title, as kept


@dataclass(frozen=True)
class RunRecord:
    number: int  # 1, 2, 3 ... in the order the session started its models
    config: GPTConfig
    corpus: str  # what it trained on, for display
    train: dict  # core.config.TrainConfig.to_dict() of its last Train
    step: int  # how many steps it has trained
    train_curve: tuple[list[int], list[float]]  # steps and training losses, at most CURVE_POINTS
    val_curve: tuple[list[int], list[float]]  # steps and validation losses (every evaluation)
    probe_labels: list[str]  # the probe prompt's tokens, as the attention's axes
    attention: torch.Tensor | None  # (L, H, T, T) float16 at its last step; None: no attention, or too large
    entropy_bits: torch.Tensor | None  # (L, H) mean entropy of each head's rows: low means saturated
    title: str = ""  # what to call it instead of "Run N" (a learner's name, where a teacher compares a room's runs)

    @classmethod
    def of(cls, number: int, config: GPTConfig, corpus: str, history: list[dict], train: dict,
           probe_labels: list[str], attention: torch.Tensor | None, max_bytes: int = RUNS_BYTES // RUNS_KEPT,
           title: str = "") -> "RunRecord":
        """A record of a run from its trainer's `history` rows and its last attention maps (L, H, T, T)."""
        if attention is not None and attention.numel() * 2 > max_bytes:
            attention = None  # a run too large to keep whole still keeps its curves
        maps = None if attention is None else attention.detach().to(torch.float16).cpu()
        trained = [(row["step"], row["train_loss"]) for row in history if row.get("train_loss") is not None]
        stride = max(1, -(-len(trained) // CURVE_POINTS))  # ceiling division
        thinned = trained[::stride] + (trained[-1:] if (len(trained) - 1) % stride else [])  # the last one too
        evaluated = [(row["step"], row["val_loss"]) for row in history if row.get("val_loss") is not None]
        return cls(
            number, config, corpus, dict(train), history[-1]["step"] if history else 0,
            _columns(thinned), _columns(evaluated), list(probe_labels), maps,
            None if maps is None else entropy_bits(maps.float())[0], title,
        )

    @property
    def val_loss(self) -> float | None:
        return self.val_curve[1][-1] if self.val_curve[1] else None

    @property
    def train_loss(self) -> float | None:
        return self.train_curve[1][-1] if self.train_curve[1] else None

    @property
    def nbytes(self) -> int:
        return 0 if self.attention is None else self.attention.numel() * self.attention.element_size()

    def setting(self, name: str):
        """A compared setting's value: a model field (GPTConfig) or a training one (TrainConfig)."""
        return getattr(self.config, name) if hasattr(self.config, name) else self.train.get(name)

    def describe(self, names: list[str]) -> str:
        """The settings `names` of this run in words: "2 layers, 4 heads, no √d scaling"."""
        return ", ".join(_phrase(COMPARED[name], self.setting(name)) for name in names)


def _phrase(label: str, value) -> str:
    if value is None:  # an option left out: no window
        return f"no {label}"
    if isinstance(value, bool):
        return label if value else f"no {label}"
    if isinstance(value, int) and label.endswith("s"):  # "4 heads", "1 head"
        return f"{value} {label[:-1] if value == 1 else label}"
    return f"{label} {value:g}" if isinstance(value, float) else f"{label} {value}"


def _columns(pairs: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    return [step for step, _ in pairs], [float(value) for _, value in pairs]


class RunLog:
    """The last `max_runs` runs of one session, oldest first."""

    def __init__(self, max_runs: int = RUNS_KEPT) -> None:
        self.max_runs = max_runs
        self.records: list[RunRecord] = []
        self._numbered = 0

    def new_number(self) -> int:
        """The number of a new run (a new model), never reused in this log."""
        self._numbered += 1
        return self._numbered

    @property
    def last_number(self) -> int:
        """The number the latest run got (0: none yet)."""
        return self._numbered

    def keep(self, record: RunRecord) -> None:
        """Keep `record`, replacing the run's earlier record; past `max_runs`, the oldest goes."""
        self.records = [r for r in self.records if r.number != record.number] + [record]
        del self.records[: max(0, len(self.records) - self.max_runs)]

    def get(self, numbers: list[int]) -> list[RunRecord]:
        """The kept records among `numbers`, oldest first (numbers no longer kept are left out)."""
        wanted = set(numbers)
        return [r for r in self.records if r.number in wanted]

    @property
    def nbytes(self) -> int:
        return sum(record.nbytes for record in self.records)


def varying_fields(records: list[RunRecord]) -> list[str]:
    """The compared settings (model first, then training) whose values differ between `records`."""
    return [name for name in COMPARED if len({repr(r.setting(name)) for r in records}) > 1]


def encode_runs(runs: RunLog) -> bytes:
    """The log as safetensors bytes: each run's maps as a tensor, the rest as JSON metadata."""
    records = [{
        "number": r.number, "config": r.config.to_dict(), "corpus": r.corpus, "train": r.train, "step": r.step,
        "train_curve": r.train_curve, "val_curve": r.val_curve, "probe_labels": r.probe_labels, "title": r.title,
    } for r in runs.records]
    tensors = {f"attention.{r.number}": r.attention.contiguous() for r in runs.records if r.attention is not None}
    metadata = {"runs": json.dumps(records, allow_nan=True), "numbered": str(runs._numbered),
                "max_runs": str(runs.max_runs)}
    return pack(tensors, metadata)


def decode_runs(data: bytes) -> RunLog:
    """The inverse of `encode_runs`, every field checked (ValueError names the first that is wrong)."""
    try:
        tensors, metadata = unpack(data, ENCODED_RUNS_BYTES)
        records, numbered, max_runs = json.loads(metadata["runs"]), int(metadata["numbered"]), int(metadata["max_runs"])
    except (ValueError, KeyError, RecursionError) as error:  # the file (TensorFileError), JSON, int(), a missing key
        raise ValueError(f"the runs are damaged ({type(error).__name__}: {str(error)[:200]})") from None
    if not 1 <= max_runs <= RUNS_KEPT or not isinstance(records, list) or len(records) > max_runs:
        raise ValueError(f"the runs hold {len(records) if isinstance(records, list) else 'no list of'} runs; "
                         f"at most {RUNS_KEPT} are kept")
    log = RunLog(max_runs)
    for index, record in enumerate(records):
        try:
            log.records.append(_decoded_record(record, tensors.pop(f"attention.{record.get('number')}", None)))
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            raise ValueError(f"run {index + 1} of the kept runs is damaged: {str(error)[:200]}") from None
    numbers = [r.number for r in log.records]
    if tensors or len(set(numbers)) != len(numbers) or not 0 <= max(numbers, default=0) <= numbered:
        raise ValueError("the kept runs' numbers and maps do not match")
    log._numbered = numbered
    return log


def _decoded_record(values: dict, attention: torch.Tensor | None) -> RunRecord:
    config = GPTConfig.from_dict(values["config"])
    number, step, corpus, train, labels = (values[key] for key in ("number", "step", "corpus", "train", "probe_labels"))
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (number, step)):
        raise ValueError("its number and step must be non-negative integers")
    title = values.get("title", "")  # runs kept before titles were have none
    if (not isinstance(corpus, str) or not isinstance(title, str) or not isinstance(train, dict)
            or not all(isinstance(t, str) for t in labels)):
        raise ValueError("its corpus, title, training settings or probe tokens are not text")
    curves = [_curve(values[key]) for key in ("train_curve", "val_curve")]
    if attention is not None:
        expected = (config.n_layer, config.n_head, len(labels), len(labels))
        if attention.dtype != torch.float16 or tuple(attention.shape) != expected:
            raise ValueError(f"its maps must be float16 of shape {expected}, got {attention.dtype} {tuple(attention.shape)}")
    return RunRecord(number, config, corpus, dict(train), step, *curves, list(labels), attention,
                     None if attention is None else entropy_bits(attention.float())[0], title[:TITLE_CHARS])


def _curve(value) -> tuple[list[int], list[float]]:
    steps, losses = value
    if len(steps) != len(losses) or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
        raise ValueError("a curve's steps must be integers, one per loss")
    losses = [float(loss) for loss in losses]
    if any(math.isinf(loss) for loss in losses):  # a diverged step is NaN, never infinite
        raise ValueError("a curve holds an infinite loss")
    return list(steps), losses
