"""Safetensors bytes, the one place they are written and read: tensors plus text metadata, read back with a hard cap.

    data = pack({"maps": maps}, {"every": "4"})
    tensors, metadata = unpack(data, limit=1 << 20)   # a TensorFileError (a ValueError) says what is wrong

Reading trusts nothing of the bytes: their size is capped before anything is parsed, the header's declared
length must lie within them, the header must be a JSON object whose `__metadata__` (if any) maps text to text,
and safetensors itself checks every tensor's dtype, shape and offsets (it never unpickles). A checkpoint's
weights and training state, the runs kept to compare and the attention movie are all read here, so each of
them refuses a hostile file the same way.

Never imports the model, gradio, plotly or `playground`.
"""

from __future__ import annotations

import json

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from core.jsonvalues import clipped

LENGTH_BYTES = 8  # safetensors: the header's length (little-endian), then the JSON header, then the tensors


class TensorFileError(ValueError):
    """Bytes that are not safetensors within their cap; the message says why (a clause: callers name the file)."""


def pack(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """`tensors` (contiguous, on the CPU) and `metadata` (text to text) as safetensors bytes."""
    return save_safetensors_bytes(tensors, metadata=metadata)


def unpack(data: bytes, limit: int) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and the metadata of safetensors `data` of at most `limit` bytes, every part checked."""
    if len(data) > limit:
        raise TensorFileError(f"{len(data):,} bytes; at most {limit:,} are read")
    if len(data) < LENGTH_BYTES:
        raise TensorFileError(f"{len(data)} bytes: too short for a safetensors header")
    length = int.from_bytes(data[:LENGTH_BYTES], "little")
    if length > len(data) - LENGTH_BYTES:
        raise TensorFileError(f"its header claims {length:,} bytes; {len(data) - LENGTH_BYTES:,} follow")
    try:
        header = json.loads(data[LENGTH_BYTES: LENGTH_BYTES + length])
    except (ValueError, RecursionError) as error:  # also bad UTF-8 and deep nesting
        raise TensorFileError(f"its header is not valid JSON ({clipped(str(error), 200)})") from None
    metadata = header.get("__metadata__", {}) if isinstance(header, dict) else None
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise TensorFileError("its header is not a JSON object with text metadata")
    try:
        tensors = load_safetensors_bytes(data)  # dtypes, shapes and offsets checked against the bytes
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise TensorFileError(clipped(str(error), 200)) from None
    return tensors, metadata
