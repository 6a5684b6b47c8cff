"""Checkpoints: safetensors weights plus a JSON description; loading never unpickles.

A checkpoint is a folder (or a .zip of the same two files, for downloads and uploads):

    model.safetensors   the weights (a tied LM head is stored once, as the token embedding)
    config.json         {"format", "version", "model": GPTConfig, "tokenizer": spec, "meta": {...}}
    trainer.safetensors optional: what training needs to go on exactly where it stopped (AdamW's
                        moments, the batch and dropout random states; the step, elapsed time, loss
                        curve and optimizer settings as JSON in the file's metadata)

Everything read is checked, and any problem (bad JSON, a missing or extra tensor, a wrong
shape, a truncated file, an oversized zip member) is a `CheckpointError` whose message says
what is wrong, never a crash or a silently half-loaded model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import Tokenizer, tokenizer_from_spec

FORMAT = "attention-playground-checkpoint"
VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TRAINER_FILE = "trainer.safetensors"
MAX_WEIGHTS_BYTES = 2 << 30  # 2 GiB: GPT-2 small in float32 is 0.5 GiB
MAX_CONFIG_BYTES = 4 << 20  # a character vocabulary is small; 4 MiB is generous
MAX_TRAINER_BYTES = 2 * MAX_WEIGHTS_BYTES + (64 << 20)  # two moments per weight, plus the curve
_OPTIMIZER_KEY = re.compile(r"optimizer\.(\d+)\.(\w+)")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message says why."""


# ---------------------------------------------------------------- saving


def _unique_state(model: GPT) -> dict[str, torch.Tensor]:
    """The state dict with shared tensors (a tied LM head) kept once, under their first name."""
    state, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        state[name] = tensor.detach().to("cpu", torch.float32).contiguous()
    return state


def _encode(model: GPT, tokenizer: Tokenizer, meta: dict | None) -> tuple[bytes, bytes]:
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model {model.config.vocab_size}"
        )
    description = {
        "format": FORMAT, "version": VERSION, "model": model.config.to_dict(),
        "tokenizer": tokenizer.spec(), "meta": meta or {},
    }
    try:
        config = json.dumps(description, indent=2, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise ValueError(f"meta must be plain JSON data (numbers, strings, lists, dicts): {error}") from None
    return save_safetensors_bytes(_unique_state(model)), config


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
    return save_safetensors_bytes(tensors, metadata=metadata)


def save(path: str | Path, model: GPT, tokenizer: Tokenizer, meta: dict | None = None,
         trainer_state: dict | None = None) -> Path:
    """Write a checkpoint folder at `path` (created if needed); returns the folder.

    With `trainer_state` (`Trainer.state_dict()`), training can later resume exactly; without it,
    a trainer file left from an earlier save is removed, so the folder never mixes two runs.
    """
    weights, config = _encode(model, tokenizer, meta)
    trainer = None if trainer_state is None else encode_trainer_state(trainer_state)
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / WEIGHTS_FILE, weights)
    _write_atomic(folder / CONFIG_FILE, config)
    if trainer is None:
        (folder / TRAINER_FILE).unlink(missing_ok=True)
    else:
        _write_atomic(folder / TRAINER_FILE, trainer)
    return folder


def save_archive(path: str | Path, model: GPT, tokenizer: Tokenizer, meta: dict | None = None,
                 trainer_state: dict | None = None) -> Path:
    """Write the checkpoint as one .zip file (suffix added if missing); returns its path."""
    weights, config = _encode(model, tokenizer, meta)
    trainer = None if trainer_state is None else encode_trainer_state(trainer_state)
    archive = Path(path)
    if archive.suffix != ".zip":
        archive = archive.with_name(archive.name + ".zip")
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=archive.parent, prefix=archive.name, suffix=".part")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(CONFIG_FILE, config)
            zf.writestr(WEIGHTS_FILE, weights)
            if trainer is not None:
                zf.writestr(TRAINER_FILE, trainer)
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return archive


# ---------------------------------------------------------------- loading


def load(path: str | Path) -> tuple[GPT, Tokenizer, dict]:
    """(model in eval mode on the CPU, tokenizer, meta) from a checkpoint folder or .zip."""
    path = Path(path)
    if path.is_dir():
        weights = _read_file(path / WEIGHTS_FILE, MAX_WEIGHTS_BYTES)
        config = _read_file(path / CONFIG_FILE, MAX_CONFIG_BYTES)
    elif path.is_file():
        weights, config = _read_archive(path)
    else:
        raise CheckpointError(f"no checkpoint at {path}")
    return _decode(weights, config)


def _read_file(path: Path, limit: int) -> bytes:
    if not path.is_file():
        raise CheckpointError(f"the checkpoint has no {path.name} (expected {WEIGHTS_FILE} and {CONFIG_FILE})")
    if path.stat().st_size > limit:
        raise CheckpointError(f"{path.name} is {path.stat().st_size:,} bytes; the limit is {limit:,}")
    return path.read_bytes()


@contextlib.contextmanager
def _open_archive(path: Path) -> Iterator[zipfile.ZipFile]:
    """A checkpoint .zip, open for reading; a damaged archive is a CheckpointError."""
    try:
        with zipfile.ZipFile(path) as zf:
            yield zf
    except zipfile.BadZipFile as error:
        raise CheckpointError(f"{path.name} is not a checkpoint folder or a valid .zip ({error})") from None
    except (OSError, EOFError, zipfile.LargeZipFile, NotImplementedError, RuntimeError) as error:
        raise CheckpointError(f"{path.name} could not be read as a zip archive ({error})") from None


def _read_archive(path: Path) -> tuple[bytes, bytes]:
    with _open_archive(path) as zf:
        return (_read_member(zf, WEIGHTS_FILE, MAX_WEIGHTS_BYTES),
                _read_member(zf, CONFIG_FILE, MAX_CONFIG_BYTES))


def _read_member(zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """One member, read with a hard cap: the size a zip declares is not trusted (zip bombs)."""
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise CheckpointError(f"the archive has no {name} (expected {WEIGHTS_FILE} and {CONFIG_FILE})") from None
    if info.file_size > limit:
        raise CheckpointError(f"{name} in the archive is {info.file_size:,} bytes; the limit is {limit:,}")
    with zf.open(info) as member:
        data = member.read(limit + 1)
    if len(data) > limit:
        raise CheckpointError(f"{name} in the archive unpacks to more than {limit:,} bytes")
    return data


def _decode(weights: bytes, config: bytes) -> tuple[GPT, Tokenizer, dict]:
    try:
        description = json.loads(config.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{CONFIG_FILE} is not valid JSON ({error})") from None
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise CheckpointError(f"{CONFIG_FILE} is not an Attention Playground checkpoint description")
    if description.get("version") != VERSION:
        raise CheckpointError(f"checkpoint version {description.get('version')!r} is not supported (expected {VERSION})")
    meta = description.get("meta", {})
    if not isinstance(meta, dict):
        raise CheckpointError("the checkpoint's 'meta' must be a JSON object")
    try:
        model_config = GPTConfig.from_dict(description.get("model"))
        tokenizer = tokenizer_from_spec(description.get("tokenizer"))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"the checkpoint's description is invalid: {error}") from None
    if tokenizer.vocab_size != model_config.vocab_size:
        raise CheckpointError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model expects {model_config.vocab_size}"
        )

    try:
        tensors = load_safetensors_bytes(weights)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{WEIGHTS_FILE} is damaged or truncated ({error})") from None
    model = GPT(model_config)
    expected = _unique_state(model)
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{WEIGHTS_FILE} does not match the model config: missing {missing or 'none'}, "
            f"unexpected {unexpected or 'none'}"
        )
    for name, tensor in tensors.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(
                f"tensor {name} has shape {tuple(tensor.shape)}, the config needs {tuple(expected[name].shape)}"
            )
        if not tensor.is_floating_point():
            raise CheckpointError(f"tensor {name} has dtype {tensor.dtype}, expected floating point")
    # strict=False only because a tied LM head is stored once; the key check above is the strict one.
    model.load_state_dict(tensors, strict=False)
    return model.eval(), tokenizer, meta


def load_trainer_state(path: str | Path) -> dict | None:
    """The training state saved with a checkpoint (for `Trainer.load_state_dict`), or None if it
    has none. Whether it fits a trainer's parameters is checked when a trainer loads it."""
    path = Path(path)
    if path.is_dir():
        if not (path / TRAINER_FILE).is_file():
            return None
        data = _read_file(path / TRAINER_FILE, MAX_TRAINER_BYTES)
    elif path.is_file():
        with _open_archive(path) as zf:
            if TRAINER_FILE not in zf.namelist():
                return None
            data = _read_member(zf, TRAINER_FILE, MAX_TRAINER_BYTES)
    else:
        raise CheckpointError(f"no checkpoint at {path}")
    return decode_trainer_state(data)


def decode_trainer_state(data: bytes) -> dict:
    """The inverse of `encode_trainer_state`, with every field checked (a `CheckpointError` if not)."""
    damaged = f"{TRAINER_FILE} is damaged or truncated"
    try:
        tensors = load_safetensors_bytes(data)
        header = json.loads(data[8: 8 + int.from_bytes(data[:8], "little")])  # safetensors: length, JSON header
        info = json.loads(header["__metadata__"]["trainer"])
    except (SafetensorError, ValueError, RuntimeError, KeyError, TypeError) as error:
        raise CheckpointError(f"{damaged} ({error})") from None
    if not isinstance(info, dict):
        raise CheckpointError(f"{damaged}: its metadata is not a JSON object")
    step, elapsed, history, groups = (info.get(key) for key in ("step", "elapsed", "history", "param_groups"))
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{damaged}: step must be a non-negative integer, got {step!r}")
    if not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool) or not elapsed >= 0:
        raise CheckpointError(f"{damaged}: elapsed must be a non-negative number of seconds, got {elapsed!r}")
    if not isinstance(history, list) or not all(isinstance(row, dict) for row in history):
        raise CheckpointError(f"{damaged}: history must be a list of JSON objects")
    if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                               for g in groups):
        raise CheckpointError(f"{damaged}: param_groups must be a list of objects with 'params'")
    for name in ("rng.batch", "rng.dropout"):
        if tensors.get(name) is None or tensors[name].dtype != torch.uint8 or tensors[name].dim() != 1:
            raise CheckpointError(f"{damaged}: {name} must be a byte tensor")
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        if name.startswith("rng."):
            continue
        match = _OPTIMIZER_KEY.fullmatch(name)
        if match is None:
            raise CheckpointError(f"{damaged}: unexpected tensor {name}")
        state.setdefault(int(match[1]), {})[match[2]] = tensor
    return {
        "step": step, "elapsed": float(elapsed), "history": history,
        "optimizer": {"state": state, "param_groups": groups},
        "batch_rng": tensors["rng.batch"], "dropout_rng": tensors["rng.dropout"],
    }
