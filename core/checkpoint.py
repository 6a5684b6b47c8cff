"""Checkpoints: safetensors weights plus a JSON description; loading never unpickles.

A checkpoint is a folder (or a .zip of the same two files, for downloads and uploads):

    model.safetensors   the weights (a tied LM head is stored once, as the token embedding)
    config.json         {"format", "version", "model": GPTConfig, "tokenizer": spec, "meta": {...}}
    trainer.safetensors optional: what training needs to go on exactly where it stopped (AdamW's
                        moments, the batch and dropout random states; the step, elapsed time, loss
                        curve and optimizer settings as JSON in the file's metadata)

A caller may keep files of its own beside these (`write_archive` of more files, `read_extra` of them,
with the same caps and checks); the app keeps its runs to compare and its attention movie so.

Everything read is checked, and any problem (bad JSON, a missing or extra tensor, a wrong
shape, NaN or infinite values, a truncated file, an oversized file or zip member) is a
`CheckpointError` whose short message says what is wrong, never a crash or a silently
half-loaded model.

Loading reads the description first: its model config, once the caller has checked it (say, against a
server's caps), bounds everything after. Each file is read with a hard cap derived from it (`weights_bytes`,
`trainer_bytes`), and the model is built on the meta device with the loaded tensors as its parameters: at
its peak a load holds the weights twice (the file's bytes and the tensors), never a throwaway initialisation.

Safetensors bytes are read by `core.tensorfile` (the one header reader). Never imports the training loop
(a training state is a plain dict here), the movie or the runs (`playground.kept` keeps those beside a
checkpoint), gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from core.config import GPTConfig
from core.jsonvalues import as_float, clipped, is_count, param_groups_problem, shown
from core.model import GPT
from core.tensorfile import TensorFileError, pack, unpack
from core.tokenizers import Tokenizer, tokenizer_from_spec

FORMAT = "attention-playground-checkpoint"
VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TRAINER_FILE = "trainer.safetensors"
MAX_WEIGHTS_BYTES = 2 << 30  # 2 GiB: GPT-2 small in float32 is 0.5 GiB
MAX_CONFIG_BYTES = 4 << 20  # a character vocabulary is small; 4 MiB is generous
MAX_TRAINER_BYTES = 2 * MAX_WEIGHTS_BYTES + (64 << 20)  # two moments per weight, plus the curve
ANSWER_KEYS = ("answer_loss", "answer_accuracy")  # a task corpus's score (core.train), in history rows
MAX_HISTORY_ROWS = 1_000_000  # loss-curve rows, one a step: the app's max_iters without caps
MAX_META_TEXT = 256  # characters of a meta name (corpus, preset, text file): shown to users
# Sizes a file of a known model can take (see weights_bytes and trainer_bytes):
HEADER_BYTES = 64 << 10  # a safetensors JSON header's fixed part and metadata
TENSOR_HEADER_BYTES = 256  # one tensor's entry in it: name, dtype, shape, offsets
HISTORY_ROW_BYTES = 200  # one loss-curve row as JSON, quoted inside the header: about 130 at most
RNG_STATE_BYTES = 8 << 10  # a CPU random generator's state is 5,056 bytes
READ_PIECE_BYTES = 1 << 20
_OPTIMIZER_KEY = re.compile(r"optimizer\.(\d{1,9})\.(\w+)")  # a bounded index: int() of it cannot fail


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message says why."""


# ---------------------------------------------------------------- saving


def _unique_state(model: GPT) -> dict[str, torch.Tensor]:
    """The state dict's tensors themselves (not copies; also on the meta device) with shared ones
    (a tied LM head) kept once, under their first name."""
    state, seen = {}, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            state[name] = tensor
    return state


def _write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename: a crash never leaves half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def encode_trainer_state(state: dict) -> bytes:
    """`Trainer.state_dict()` as safetensors bytes: tensors as tensors, the rest as JSON metadata."""
    tensors = {"rng.batch": state["batch_rng"], "rng.dropout": state["dropout_rng"]}
    for index, moments in state["optimizer"]["state"].items():
        for key, value in moments.items():
            tensors[f"optimizer.{index}.{key}"] = value.detach().to("cpu").contiguous()
    info = {key: state[key] for key in ("step", "elapsed", "history")}
    info["param_groups"] = state["optimizer"]["param_groups"]
    try:
        metadata = {"trainer": json.dumps(info, allow_nan=True)}  # a diverged run's curve may hold NaN
    except (TypeError, ValueError) as error:
        raise ValueError(f"the training state is not plain JSON data: {error}") from None
    return pack(tensors, metadata)


def save(path: str | Path, model: GPT, tokenizer: Tokenizer, meta: dict | None = None,
         trainer_state: dict | None = None) -> Path:
    """Write a checkpoint folder at `path` (created if needed); returns the folder.

    With `trainer_state` (`Trainer.state_dict()`), training can later resume exactly; without it,
    a trainer file left from an earlier save is removed, so the folder never mixes two runs.
    """
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in encode(model, tokenizer, meta, trainer_state).files.items():
        if data is None:
            (folder / name).unlink(missing_ok=True)
        else:
            _write_atomic(folder / name, data)
    return folder


@dataclass(frozen=True)
class Encoded:
    """A checkpoint encoded in memory: taken where the model lives (a training thread: no disk), written
    elsewhere (a background writer) while the model trains on."""

    config: bytes
    weights: bytes
    trainer: bytes | None = None

    @property
    def files(self) -> dict[str, bytes | None]:
        return {CONFIG_FILE: self.config, WEIGHTS_FILE: self.weights, TRAINER_FILE: self.trainer}

    def write_archive(self, path: str | Path, compress: bool = True) -> Path:
        """Write it as one .zip file (suffix added if missing), atomically; returns its path."""
        return write_archive(path, self.files, compress)


def write_archive(path: str | Path, files: dict[str, bytes | None], compress: bool = True) -> Path:
    """Write `files` (a checkpoint's, and any the caller keeps beside them; None: left out) as one .zip file
    (suffix added if missing), atomically; returns its path. Without `compress` it is written 200x faster
    and 20% larger (float weights hardly compress)."""
    archive = Path(path)
    if archive.suffix != ".zip":
        archive = archive.with_name(archive.name + ".zip")
    archive.parent.mkdir(parents=True, exist_ok=True)
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            if data is not None:
                zf.writestr(name, data)
    _write_atomic(archive, packed.getvalue())
    return archive


def encode(model: GPT, tokenizer: Tokenizer, meta: dict | None = None, trainer_state: dict | None = None) -> Encoded:
    """The checkpoint's files as bytes (copies: the model may change right after)."""
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model {model.config.vocab_size}")
    description = {"format": FORMAT, "version": VERSION, "model": model.config.to_dict(),
                   "tokenizer": tokenizer.spec(), "meta": meta or {}}
    try:
        config = json.dumps(description, indent=2, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise ValueError(f"meta must be plain JSON data (numbers, strings, lists, dicts): {error}") from None
    weights = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in _unique_state(model).items()}
    return Encoded(config, pack(weights),
                   None if trainer_state is None else encode_trainer_state(trainer_state))


def save_archive(path: str | Path, model: GPT, tokenizer: Tokenizer, meta: dict | None = None,
                 trainer_state: dict | None = None) -> Path:
    """Write the checkpoint as one .zip file (suffix added if missing); returns its path."""
    return encode(model, tokenizer, meta, trainer_state).write_archive(path)


# ---------------------------------------------------------------- sizes


def weights_bytes(config: GPTConfig) -> int:
    """The most bytes a weights file of this model takes: its unique float32 tensors, exactly,
    plus room for the safetensors header. A CheckpointError beyond MAX_WEIGHTS_BYTES."""
    sizes = _tensor_sizes(config)
    return 4 * sum(sizes) + _header_bytes(len(sizes))


def trainer_bytes(config: GPTConfig, max_history: int = MAX_HISTORY_ROWS) -> int:
    """The most bytes a trainer file of this model takes: AdamW's two float32 moments and step per
    parameter tensor, the two random states, and the JSON of at most `max_history` loss-curve rows."""
    sizes = _tensor_sizes(config)
    tensors = 4 * (2 * sum(sizes) + len(sizes)) + 2 * RNG_STATE_BYTES
    return tensors + HISTORY_ROW_BYTES * max_history + _header_bytes(3 * len(sizes) + 2)


def _header_bytes(n_tensors: int) -> int:
    """Room for a safetensors JSON header: each tensor's name, dtype, shape and offsets, and metadata."""
    return HEADER_BYTES + TENSOR_HEADER_BYTES * n_tensors


def _tensor_sizes(config: GPTConfig) -> list[int]:
    """Element counts of the model's unique tensors, from a model on the meta device (no memory)."""
    too_large = CheckpointError(f"the checkpoint's model is larger than {MAX_WEIGHTS_BYTES:,} bytes of weights, "
                                "the most this program loads")
    # Each vocabulary entry and each layer holds at least n_embd weights: a bound that refuses an
    # absurd config (a billion layers) before even its meta model, a Python object per module, is built.
    if 4 * (config.vocab_size + config.n_layer) * config.n_embd > MAX_WEIGHTS_BYTES:
        raise too_large
    with torch.device("meta"):
        sizes = [tensor.numel() for tensor in _unique_state(GPT(config)).values()]
    if 4 * sum(sizes) > MAX_WEIGHTS_BYTES:
        raise too_large
    return sizes


# ---------------------------------------------------------------- loading


def load(path: str | Path, *,
         check_config: Callable[[GPTConfig], None] | None = None) -> tuple[GPT, Tokenizer, dict]:
    """(model in eval mode on the CPU, tokenizer, meta) from a checkpoint folder or .zip.

    The description is read first; `check_config` (e.g. a server's caps) sees the model's config
    before anything of its size is read or allocated, and whatever it raises passes through
    unchanged. The weights are then read with a hard cap of `weights_bytes(config)`.
    """
    with _opened(Path(path)) as source:
        config, tokenizer, meta = _decode_description(_required(source, CONFIG_FILE, MAX_CONFIG_BYTES))
        if check_config is not None:
            check_config(config)
        # The file's bytes live only while safetensors parses them: never beside the model.
        limit = weights_bytes(config)
        tensors = _parse_weights(_required(source, WEIGHTS_FILE, limit), limit)
    return _assemble(config, tensors), tokenizer, meta


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[Path | zipfile.ZipFile]:
    """A checkpoint folder, or its .zip open for reading (a damaged archive is a CheckpointError)."""
    if path.is_dir():
        yield path
    elif path.is_file():
        with _unreadable(f"{path.name} is not a checkpoint folder or a valid .zip"):
            archive = zipfile.ZipFile(path)
        with archive:  # errors of the caller's block are its own: only opening is translated
            yield archive
    else:
        raise CheckpointError(f"no checkpoint at {path}")


@contextlib.contextmanager
def _unreadable(message: str) -> Iterator[None]:
    """Turn the ways a file or zip member can fail to read into a CheckpointError: `message (why)`."""
    try:
        yield
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, NotImplementedError,
            RuntimeError) as error:
        raise CheckpointError(f"{message} ({clipped(str(error), 200)})") from None


def _read(source: Path | zipfile.ZipFile, name: str, limit: int) -> bytes | None:
    """One file of a checkpoint folder or member of its .zip (None if absent), read with a hard cap:
    neither a file's size nor the size a zip declares is trusted (zip bombs, growing files)."""
    if isinstance(source, Path):
        if not (source / name).is_file():
            return None
        size, open_stream = (source / name).stat().st_size, lambda: open(source / name, "rb")
    else:
        try:
            info = source.getinfo(name)
        except KeyError:
            return None
        size, open_stream = info.file_size, lambda: source.open(info)
    if size > limit:
        raise CheckpointError(f"{name} is {size:,} bytes; the limit is {limit:,}")
    # In pieces: a single read() of a zip member holds the compressed bytes, the inflated ones
    # and a copy of those at once; pieces joined at the end cost the data twice at most.
    pieces, size = [], 0
    with _unreadable(f"{name} could not be read"), open_stream() as stream:
        while size <= limit and (piece := stream.read(min(READ_PIECE_BYTES, limit + 1 - size))):
            pieces.append(piece)
            size += len(piece)
    if size > limit:
        raise CheckpointError(f"{name} holds more than {limit:,} bytes, the limit")
    return b"".join(pieces)


def _required(source: Path | zipfile.ZipFile, name: str, limit: int) -> bytes:
    data = _read(source, name, limit)
    if data is None:
        raise CheckpointError(f"the checkpoint has no {name} (expected {WEIGHTS_FILE} and {CONFIG_FILE})")
    return data


def _decode_description(config: bytes) -> tuple[GPTConfig, Tokenizer, dict]:
    try:
        description = json.loads(config.decode("utf-8"))
    except (ValueError, RecursionError) as error:  # also bad UTF-8, numbers of 4,300+ digits, deep nesting
        raise CheckpointError(f"{CONFIG_FILE} is not valid JSON ({clipped(str(error), 200)})") from None
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise CheckpointError(f"{CONFIG_FILE} is not an Attention Playground checkpoint description")
    if description.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint version {shown(description.get('version'))} is not supported (expected {VERSION})"
        )
    meta = _check_meta(description.get("meta", {}))
    try:
        model_config = GPTConfig.from_dict(description.get("model"))
        tokenizer = tokenizer_from_spec(description.get("tokenizer"))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"the checkpoint's description is invalid: {clipped(str(error), 200)}") from None
    if tokenizer.vocab_size != model_config.vocab_size:
        raise CheckpointError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model expects {model_config.vocab_size}"
        )
    return model_config, tokenizer, meta


def _check_meta(meta: object) -> dict:
    """`meta` with the fields the app and the command line use checked, and its history normalised."""
    if not isinstance(meta, dict):
        raise CheckpointError("the checkpoint's 'meta' must be a JSON object")
    for key in ("corpus", "preset", "text_file"):
        value = meta.get(key)
        if value is not None and not (isinstance(value, str) and len(value) <= MAX_META_TEXT):
            raise CheckpointError(
                f"the checkpoint's meta.{key} must be a text of at most {MAX_META_TEXT} characters, got {shown(value)}"
            )
    for key in ("step", "steps"):
        if meta.get(key) is not None and not is_count(meta[key]):
            raise CheckpointError(f"the checkpoint's meta.{key} must be a non-negative integer, got {shown(meta[key])}")
    if not isinstance(meta.get("train_config"), (dict, type(None))):
        raise CheckpointError(
            f"the checkpoint's meta.train_config must be an object, got {shown(meta['train_config'])}"
        )
    if "history" not in meta:
        return meta
    try:
        return {**meta, "history": check_history(meta["history"])}
    except CheckpointError as error:
        raise CheckpointError(f"the checkpoint's {error}") from None


def check_history(rows: object, max_rows: int = MAX_HISTORY_ROWS) -> list[dict]:
    """A loss curve read from a file (as `Trainer.history` writes it), checked; returns new rows.

    At most `max_rows` objects, each with 'step' (a non-negative integer above the previous
    row's), 'train_loss' and 'lr' (finite numbers), 'val_loss' (a number, or null or absent
    between evaluations) and, for a task corpus, 'answer_loss' and 'answer_accuracy' (likewise).
    Other keys are dropped; numbers become floats. A CheckpointError
    names the first row and field that is wrong.
    """
    if not isinstance(rows, list) or len(rows) > max_rows:
        raise CheckpointError(f"history must be a list of at most {max_rows:,} JSON objects")
    clean, previous = [], -1
    for index, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise CheckpointError(f"history row {index} must be a JSON object, got {shown(row)}")
        step = row.get("step")
        if not is_count(step) or step <= previous:
            raise CheckpointError(f"history row {index}: step must be an integer above the previous row's, "
                                  f"got {shown(step)}")
        clean.append({"step": step})
        for key in ("train_loss", "val_loss", "lr", *ANSWER_KEYS):
            value, number = row.get(key), as_float(row.get(key))
            if key in ANSWER_KEYS and key not in row:
                continue  # only task corpora score their answers
            if key == "val_loss" or key in ANSWER_KEYS:  # null between evaluations; a loss may overflow
                if value is not None and number is None:
                    raise CheckpointError(f"history row {index}: {key} must be a number or null, got {shown(value)}")
            elif number is None or not math.isfinite(number):  # the trainer records only finite ones
                raise CheckpointError(f"history row {index}: {key} must be a finite number, got {shown(value)}")
            clean[-1][key] = number
        previous = step
    return clean


def _parse_weights(data: bytes, limit: int) -> dict[str, torch.Tensor]:
    try:
        return unpack(data, limit)[0]
    except TensorFileError as error:
        raise CheckpointError(f"{WEIGHTS_FILE} is damaged or truncated ({error})") from None


def _assemble(config: GPTConfig, tensors: dict[str, torch.Tensor]) -> GPT:
    """The model of `config` with `tensors` (checked against it) as its parameters, not copies of them."""
    with torch.device("meta"):
        model = GPT(config)  # shapes only: no memory, no random draws
    expected = _unique_state(model)
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(clipped(
            f"{WEIGHTS_FILE} does not match the model config: missing {missing or 'none'}, "
            f"unexpected {unexpected or 'none'}", 300))
    for name, tensor in tensors.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(
                f"tensor {name} has shape {tuple(tensor.shape)}, the config needs {tuple(expected[name].shape)}"
            )
        _check_values(WEIGHTS_FILE, name, tensor)
        tensors[name] = tensor.float()  # the model computes in float32 (a no-op for the files we write)
    # assign=True makes the loaded tensors the parameters instead of copying them into new ones.
    # strict=False only because a tied LM head is stored once (the key check above is the strict
    # one); assigning gives the embedding a new Parameter, so the head is tied to it again.
    model.load_state_dict(tensors, strict=False, assign=True)
    if config.tie_weights:
        model.lm_head.weight = model.token_embedding.weight
    return model.eval()


def _check_values(file: str, name: str, tensor: torch.Tensor) -> None:
    if not tensor.is_floating_point():
        raise CheckpointError(f"{file}: tensor {name} has dtype {tensor.dtype}, expected floating point")
    if not torch.isfinite(tensor).all():
        raise CheckpointError(f"{file}: tensor {name} holds NaN or infinite values")


def load_trainer_state(path: str | Path, *, config: GPTConfig | None = None,
                       max_history: int = MAX_HISTORY_ROWS) -> dict | None:
    """The training state saved with a checkpoint (for `Trainer.load_state_dict`), or None if it
    has none. Whether it fits a trainer's parameters is checked when a trainer loads it.

    With `config` (the loaded model's) the file is read with a hard cap of `trainer_bytes(config,
    max_history)`, what that model's state takes; without, MAX_TRAINER_BYTES. The loss curve may
    have at most `max_history` rows.
    """
    limit = MAX_TRAINER_BYTES if config is None else trainer_bytes(config, max_history)
    with _opened(Path(path)) as source:
        data = _read(source, TRAINER_FILE, limit)
    return None if data is None else decode_trainer_state(data, max_history)


def read_extra(path: str | Path, name: str, limit: int) -> bytes | None:
    """A file the caller keeps beside a checkpoint (`write_archive`), from its folder or .zip, read with the
    hard cap `limit` as the checkpoint's own files are (a CheckpointError if not); None if absent."""
    with _opened(Path(path)) as source:
        return _read(source, name, limit)


def decode_trainer_state(data: bytes, max_history: int = MAX_HISTORY_ROWS) -> dict:
    """The inverse of `encode_trainer_state`, with every field checked (a `CheckpointError` if not)."""
    damaged = f"{TRAINER_FILE} is damaged or truncated"
    try:
        tensors, metadata = unpack(data, MAX_TRAINER_BYTES)  # its caller read it with a model's own cap
        info = json.loads(metadata["trainer"])
    except (ValueError, KeyError, RecursionError) as error:  # TensorFileError is a ValueError
        raise CheckpointError(f"{damaged} ({clipped(str(error), 200)})") from None
    if not isinstance(info, dict):
        raise CheckpointError(f"{damaged}: its metadata is not a JSON object")
    step, elapsed, groups = (info.get(key) for key in ("step", "elapsed", "param_groups"))
    if not is_count(step):
        raise CheckpointError(f"{damaged}: step must be a non-negative integer, got {shown(step)}")
    seconds = as_float(elapsed)
    if seconds is None or not 0 <= seconds < math.inf:
        raise CheckpointError(f"{damaged}: elapsed must be a non-negative number of seconds, got {shown(elapsed)}")
    try:
        history = check_history(info.get("history"), max_history)
    except CheckpointError as error:
        raise CheckpointError(f"{damaged}: {error}") from None
    if history and history[-1]["step"] > step:
        raise CheckpointError(f"{damaged}: its history goes on past its step ({step})")
    problem = param_groups_problem(groups)
    if problem:
        raise CheckpointError(f"{damaged}: {problem}")
    for name in ("rng.batch", "rng.dropout"):
        if tensors.get(name) is None or tensors[name].dtype != torch.uint8 or tensors[name].dim() != 1:
            raise CheckpointError(f"{damaged}: {name} must be a byte tensor")
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        if name.startswith("rng."):
            continue
        match = _OPTIMIZER_KEY.fullmatch(name)
        if match is None:
            raise CheckpointError(f"{damaged}: unexpected tensor {clipped(name, 60)}")
        _check_values(TRAINER_FILE, name, tensor)
        state.setdefault(int(match[1]), {})[match[2]] = tensor
    return {
        "step": step, "elapsed": seconds, "history": history,
        "optimizer": {"state": state, "param_groups": groups},
        "batch_rng": tensors["rng.batch"], "dropout_rng": tensors["rng.dropout"],
    }
