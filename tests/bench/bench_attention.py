"""Attention tab costs: time to analyse a text and build each figure, and each figure's JSON size.

    .venv/bin/python tests/bench/bench_attention.py

Runs an untrained model of each size on a full context (trained weights cost the same) with
one torch thread, like the server. Prints the median of a few runs per step.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.attention import attention_maps, head_view, summarize_heads  # noqa: E402
from core.config import GPTConfig  # noqa: E402
from core.model import GPT  # noqa: E402
from playground.figures import attention as figures  # noqa: E402

SIZES = [  # (layers, heads, n_embd, tokens)
    (4, 4, 128, 64),  # a typical playground model
    (6, 8, 256, 256),  # the public server's caps
    (12, 12, 384, 256),  # the largest the issue asks for
]
RUNS = 3


def median_time(fn) -> tuple[float, object]:
    times, result = [], None
    for _ in range(RUNS):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'size':>16} {'step':>10} {'ms':>8} {'JSON kB':>8}")
    for n_layer, n_head, n_embd, n_tokens in SIZES:
        model = GPT(GPTConfig(vocab_size=65, block_size=n_tokens, n_layer=n_layer, n_head=n_head, n_embd=n_embd))
        ids = torch.randint(65, (n_tokens,), generator=torch.Generator().manual_seed(0)).tolist()
        labels = [chr(48 + i) for i in ids]
        size = f"{n_layer}x{n_head}x{n_tokens}"
        seconds, maps = median_time(lambda: attention_maps(model, ids))
        print(f"{size:>16} {'maps':>10} {seconds * 1000:8.0f}")
        seconds, summaries = median_time(lambda: summarize_heads(maps, ids))
        print(f"{size:>16} {'summary':>10} {seconds * 1000:8.0f}")
        builders = {
            "grid": lambda: figures.heatmap_grid(maps, labels),
            "board": lambda: figures.summary_figure(summaries),
            "large": lambda: figures.head_heatmap(maps[-1, -1], labels, n_layer - 1, n_head - 1),
            "head view": lambda: figures.head_view(head_view(maps, n_tokens - 1)[-1], labels, n_tokens - 1, 0),
            "live": lambda: figures.live_heatmap(maps[:, :, :32, :32], labels[:32]),
        }
        for name, build in builders.items():
            seconds, fig = median_time(lambda: build().to_json())
            print(f"{size:>16} {name:>10} {seconds * 1000:8.0f} {len(fig) / 1000:8.0f}")


if __name__ == "__main__":
    main()
