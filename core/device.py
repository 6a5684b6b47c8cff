"""Where a model trains and in what precision: the device `"auto"` picks, and the autocast dtype.

    device = resolve_device("auto")            # CUDA, then Apple MPS, then the CPU
    amp = autocast_dtype(device, "auto")       # bfloat16 where the hardware has it natively, else None

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

    'auto' picks bfloat16 where the hardware computes it natively (CUDA with bf16 support, CPUs
    with AVX512-BF16 or AMX): about twice the matmul throughput, same loss curve to ~1e-2.
    Elsewhere (MPS, older CPUs, where bfloat16 would be emulated) it trains in float32.
    """
    if dtype == "float32":
        return None
    if dtype == "bfloat16":
        return torch.bfloat16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu" and _cpu_has_native_bf16():
        return torch.bfloat16
    return None


def _cpu_has_native_bf16() -> bool:
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu, torch >= 2.3
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)
