"""Inside a head (issue 13): server time of the Attention tab's tools, called in-process as the
server calls them, for a 6-layer, 8-head model on a 64-token text.

    .venv/bin/python tests/bench/bench_inside.py [--runs 30] [--widths 256 512]

Each call goes through the tab's handler (session lookup, job lock, checks, core, figure) and then
turns its figures into JSON as Gradio does before sending them. Random weights of a 65-character
vocabulary: the work is the same as for trained ones. One torch thread, like the server. Prints the
median and 95th percentile in ms per handler; run it alone, the load average is printed with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import string
import sys
import time
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.config import GPTConfig  # noqa: E402
from core.model import GPT  # noqa: E402
from core.tokenizers import CharTokenizer  # noqa: E402
from playground.context import AppContext  # noqa: E402
from playground.sessions import SessionRegistry, TrainedModel  # noqa: E402
from playground.settings import Settings  # noqa: E402
from playground.tabs import attention as tab  # noqa: E402

ALPHABET = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase  # Tiny Shakespeare's 65
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak. All:\n"[:64]
N_LAYER, N_HEAD = 6, 8
SESSION = "bench"


def handlers_with_model(n_embd: int) -> tab.AttentionHandlers:
    """The tab's handlers over a registry holding one session with a model and TEXT analysed."""
    with gr.Blocks():
        ctx = AppContext(settings=Settings.from_env({}), registry=SessionRegistry(10, 3600.0),
                         model_changed=gr.Textbox(), tabs=gr.Tabs())
    handlers = tab.AttentionHandlers(ctx)
    tokenizer = CharTokenizer(ALPHABET)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=256, n_layer=N_LAYER, n_head=N_HEAD,
                       n_embd=n_embd)
    model = GPT(config, generator=torch.Generator().manual_seed(0))
    ctx.registry.get(SESSION).trained = TrainedModel(model, tokenizer, "bench")
    handlers.analyse(TEXT, SESSION)
    return handlers


def served(outputs) -> None:
    """What Gradio does with a handler's figures before sending them: JSON."""
    for value in outputs if isinstance(outputs, tuple) else (outputs,):
        if isinstance(value, go.Figure):
            value.to_json()


def without_kept_importance(handlers: tab.AttentionHandlers, mode: str):
    """The importance as computed afresh (the tab keeps it per analysis after the first call)."""
    def call():
        handlers.ctx.registry.get(SESSION).attention.results.pop("importance", None)
        return handlers.importance(mode, SESSION)
    return call


def calls(handlers: tab.AttentionHandlers) -> dict:
    last = len(TEXT) - 1
    return {
        "/head_steps": lambda: handlers.head_steps(3, 5, last, True, True, SESSION),
        "/ablate zero, 2 heads": lambda: handlers.knock_out(["L2 H1", "L4 H6"], "zero", SESSION),
        "/ablate mean, 2 heads": lambda: handlers.knock_out(["L2 H1", "L4 H6"], "mean", SESSION),
        "/head_importance zero": without_kept_importance(handlers, "zero"),
        "/head_importance, kept": lambda: handlers.importance("zero", SESSION),
        "/logit_lens": lambda: handlers.lens(5, SESSION),
        "/attention_export": lambda: handlers.export(SESSION),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 512])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores; "
          f"torch {torch.__version__}, 1 thread")
    print(f"{'model':>14} {'handler':>24} {'median ms':>10} {'p95 ms':>8}")
    for n_embd in args.widths:
        handlers = handlers_with_model(n_embd)
        for name, call in calls(handlers).items():
            served(call())  # warm up
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                served(call())
                times.append((time.perf_counter() - start) * 1000)
            p95 = statistics.quantiles(times, n=20)[-1]
            print(f"{f'{N_LAYER}x{N_HEAD}x{n_embd}':>14} {name:>24} {statistics.median(times):10.1f} {p95:8.1f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
