"""The optimizer and learning-rate schedule shared by every training loop.

Imports torch only. Never imports the model, gradio, plotly or `playground`.
"""

from __future__ import annotations

import math

import torch


def configure_optimizer(
    model: torch.nn.Module,
    learning_rate: float,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.99),
) -> torch.optim.AdamW:
    """AdamW that decays matrices (weights, embeddings) but not biases or LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    # The fused kernel is one launch per step instead of one per tensor: faster on CPU and GPU.
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=True)


def learning_rate_at(
    step: int, learning_rate: float, min_lr: float, warmup_iters: int, decay_iters: int
) -> float:
    """Linear warmup to `learning_rate`, then cosine decay to `min_lr` at `decay_iters`, then flat."""
    if step < warmup_iters:
        return learning_rate * (step + 1) / (warmup_iters + 1)
    if step >= decay_iters:
        return min_lr
    progress = (step - warmup_iters) / max(1, decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (learning_rate - min_lr)
