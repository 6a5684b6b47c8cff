"""Where a model trains and in what precision: the device `"auto"` picks, and the autocast dtype.

    device = resolve_device("auto")            # CUDA, then Apple MPS, then the CPU
    amp = autocast_dtype(device, "auto")       # bfloat16 on CUDA and AMX CPUs, else None

The library never changes torch's thread count: a process running several trainings should set it
(one thread per training avoids OpenMP oversubscription on a shared CPU).
Imports torch only. Never imports the model, the training loop, gradio, plotly or `playground`.
"""

from __future__ import annotations

import torch

DTYPES = ("auto", "float32", "bfloat16")


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' picks CUDA, then Apple MPS, then the CPU; an explicit device must exist."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but CUDA is not available")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device 'mps' was asked for but Apple MPS is not available")
    return torch.device(name)


def autocast_dtype(device: torch.device, dtype: str) -> torch.dtype | None:
    """The autocast dtype for a device, or None for plain float32.

    'auto' picks bfloat16 where it is the faster choice: CUDA with bf16 support, and CPUs with
    Intel's AMX tile units (about twice float32's matmul throughput there). A CPU with only
    AVX512-BF16 trains slower in it than in float32 (measured on a 2-core Xeon: the default task
    0.77x, the Shakespeare CPU recipe 0.60x), so it stays float32, as do MPS and older CPUs.
    """
    if dtype == "float32":
        return None
    if dtype == "bfloat16":
        return torch.bfloat16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu" and getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return torch.bfloat16
    return None
