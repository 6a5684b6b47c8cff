"""Inside a head (issues 13 and 23): server time of the Attention tab's tools, called in-process as the
server calls them, for a 6-layer, 8-head model on a 64-token text, and for GPT-2 small's shape.

    .venv/bin/python tests/bench/bench_inside.py [--runs 30] [--widths 256 512] [--gpt2-runs 3]
    .venv/bin/python tests/bench/bench_inside.py --names-pair [--runs 3] [--threads 1 2] [--gguf FILE]

Each call goes through the tab's handler (session lookup, job lock, checks, core, figure) and then
turns its figures into JSON as Gradio does before sending them. Random weights of a 65-character
vocabulary: the work is the same as for trained ones. One torch thread, like the server. Prints the
median and 95th percentile in ms per handler beside the host's speed; run it alone.

Patching runs the corrupted text once per (layer, position) of the stream from the first token where
the texts differ, and once per head: it is timed on a pair differing at token 32 of 64 (one changed
character, as the built-in pairs) and at token 0 (the most work 64 tokens can ask). GPT-2 small
(random weights, 50,257 tokens) is timed on the names pair, which the public server's multiply-add
budget (`max_importance_gmacs`, the one head importance keeps to) must admit, and at the longest
text the budget admits.

`--names-pair` (issue 40) times only patching (`core.attribution.patch`, every place of the stream and every
head) of the names pair on GPT-2 small's shape and SmolLM2-135M's (30 layers of 9 heads, random weights:
the work does not depend on them). The GPT-2 tokenizer writes the pair for both: SmolLM2's own writes it
in as many tokens (14) with the same first difference (token 9). With `--gguf FILE` (the real SmolLM2-135M-Instruct,
which `tests/support/gguf_files.py` fetches into ~/.cache/playground), that model too, with its own tokenizer.
Run against an older checkout of `core/` (copy this file into it) for the figures before.
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
from host import describe_host  # noqa: E402

from core.attribution import MIN_PATCH_GAP, first_difference, patch, patch_macs  # noqa: E402
from core.config import GPTConfig  # noqa: E402
from core.gguf import load_gguf  # noqa: E402
from core.model import GPT  # noqa: E402
from core.pretrained import llama_config  # noqa: E402
from core.tokenizers import CharTokenizer, GPT2Tokenizer  # noqa: E402
from playground.context import AppContext  # noqa: E402
from playground.sessions import SessionRegistry, TrainedModel  # noqa: E402
from playground.settings import Settings  # noqa: E402
from playground.tabs import attention as tab  # noqa: E402
from playground.tabs.attention.patching import PAIRS  # noqa: E402

ALPHABET = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase  # Tiny Shakespeare's 65
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak. All:\n"[:64]
# One character changed: at token 32 ("h" of "hear" to "f"), and at token 0
CHANGED_MID, CHANGED_FIRST = TEXT[:32] + "f" + TEXT[33:], "G" + TEXT[1:]
GPT2_SMALL = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, tie_weights=True,
                  lm_head_bias=False, activation="gelu_tanh")
SMOLLM2_135M = dict(model_type="llama", vocab_size=49152, max_position_embeddings=8192, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, hidden_size=576, intermediate_size=1536,
                    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
N_LAYER, N_HEAD = 6, 8
SESSION = "bench"


def handlers_with_model(config: GPTConfig, tokenizer, text: str) -> tab.AttentionHandlers:
    """The tab's handlers (the public server's settings) over a registry holding one session with a
    random model of `config` and `text` analysed."""
    with gr.Blocks():
        ctx = AppContext(settings=Settings.from_env({}), registry=SessionRegistry(10**9, 3600.0),
                         model_changed=gr.Textbox(), tabs=gr.Tabs())
    handlers = tab.AttentionHandlers(ctx)
    model = GPT(config, generator=torch.Generator().manual_seed(0))
    ctx.registry.get(SESSION).trained = TrainedModel(model, tokenizer, "bench")
    handlers.analysis.analyse(text, SESSION)
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
        return handlers.knockouts.importance(mode, SESSION)
    return call


def calls(handlers: tab.AttentionHandlers) -> dict:
    last = len(TEXT) - 1
    return {
        "/head_steps": lambda: handlers.steps.head_steps(3, 5, last, True, True, SESSION),
        "/ablate zero, 2 heads": lambda: handlers.knockouts.knock_out(["L2 H1", "L4 H6"], "zero", SESSION),
        "/ablate mean, 2 heads": lambda: handlers.knockouts.knock_out(["L2 H1", "L4 H6"], "mean", SESSION),
        "/head_importance zero": without_kept_importance(handlers, "zero"),
        "/head_importance, kept": lambda: handlers.knockouts.importance("zero", SESSION),
        "/logit_lens": lambda: handlers.lens.lens(5, SESSION),
        "/logit_attribution": lambda: handlers.attribution.attribution(last, "", SESSION),
        "/patch, changed at 32": lambda: handlers.patching.patching(TEXT, CHANGED_MID, SESSION),
        "/patch, changed at 0": lambda: handlers.patching.patching(TEXT, CHANGED_FIRST, SESSION),
        "/circuits": lambda: handlers.circuits.circuits(3, 5, SESSION),
        "/attention_export": lambda: handlers.export.export(SESSION),
    }


def timed(call, runs: int) -> tuple[float, float]:
    """(median, p95) ms of `call` and its JSON, after one warm-up call."""
    served(call())
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        served(call())
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), (statistics.quantiles(times, n=20)[-1] if runs > 1 else times[0])


def gpt2(runs: int) -> None:
    """GPT-2 small's shape: attribution and the names pair's patching, within the public budget."""
    tokenizer = GPT2Tokenizer()
    clean, corrupted = PAIRS[1]
    handlers = handlers_with_model(GPTConfig(**GPT2_SMALL), tokenizer, clean)
    config, budget = handlers.ctx.settings, handlers.ctx.settings.max_importance_gmacs
    ids, other = tokenizer.encode(clean), tokenizer.encode(corrupted)
    first = first_difference(ids, other)
    model_config = GPTConfig(**GPT2_SMALL)
    longest = max(n for n in range(1, config.max_attention_tokens + 1) if patch_macs(model_config, n) <= budget * 1e9)
    print(f"\nGPT-2 small's shape (random weights); the public budget: {budget:.0f} G multiply-adds")
    print(f"  names pair: {len(ids)} tokens, differing from token {first}: "
          f"{patch_macs(model_config, len(ids), first) / 1e9:.0f} G multiply-adds to patch")
    print(f"  the longest text the budget lets patch, differing from token 0: {longest} tokens "
          f"({patch_macs(model_config, longest) / 1e9:.0f} G)")
    long_clean = tokenizer.decode(list(range(1000, 1000 + longest)))
    long_ids = tokenizer.encode(long_clean)[:longest]
    long_other = [long_ids[0] + 1] + long_ids[1:]
    cases = {
        "/logit_attribution": lambda: handlers.attribution.attribution(len(ids) - 1, "", SESSION),
        "/patch, names pair": lambda: handlers.patching.patching(clean, corrupted, SESSION),
        f"/patch, {longest} tokens from 0": lambda: handlers.patching.patching(
            tokenizer.decode(long_ids), tokenizer.decode(long_other), SESSION),
    }
    for name, call in cases.items():
        median, p95 = timed(call, runs)
        print(f"{'gpt2-small':>14} {name:>28} {median:10.1f} {p95:8.1f}")


def names_pair(runs: int, threads: list[int], gguf: str | None = None) -> None:
    """Patching the names pair on GPT-2 small's and SmolLM2-135M's shapes (and the real model of `gguf`): median
    and slowest of `runs`."""
    ids, other = (GPT2Tokenizer().encode(text) for text in PAIRS[1])
    print(f"names pair: {len(ids)} tokens, differing from token {first_difference(ids, other)}")
    print(f"{'model':>14} {'threads':>7} {'G multiply-adds':>15} {'median s':>9} {'slowest s':>9}")
    for name, config in (("gpt2-small", GPTConfig(**GPT2_SMALL)), ("smollm2-135m", llama_config(SMOLLM2_135M))):
        model = GPT(config, generator=torch.Generator().manual_seed(0)).eval()
        with torch.no_grad():  # far from the initialisation, so the texts' answers differ enough to patch
            for parameter in model.parameters():
                parameter += 0.05 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1))
        time_patching(name, model, ids, other, runs, threads)
    if gguf:
        real = load_gguf(gguf)
        real_ids, real_other = (real.tokenizer.encode(text) for text in PAIRS[1])
        time_patching("real gguf", real.model.eval(), real_ids, real_other, runs, threads)


def time_patching(name: str, model: GPT, ids: list[int], other: list[int], runs: int, threads: list[int]) -> None:
    macs = patch_macs(model.config, len(ids), first_difference(ids, other)) / 1e9
    for count in threads:
        torch.set_num_threads(count)
        patch(model, ids, other)  # warm-up
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            patch(model, ids, other)
            times.append(time.perf_counter() - start)
        print(f"{name:>14} {count:>7} {macs:15.0f} {statistics.median(times):9.2f} {max(times):9.2f}")
    gap = patch(model, ids, other).gap
    assert abs(gap) >= MIN_PATCH_GAP, f"the answers differ by only {gap:.3f}: nothing was patched"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--gpt2-runs", type=int, default=3, help="0: leave GPT-2 out")
    parser.add_argument("--names-pair", action="store_true", help="only patching the names pair (issue 40)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="with --names-pair")
    parser.add_argument("--gguf", help="with --names-pair: a real model's GGUF file, timed too")
    args = parser.parse_args()
    if args.names_pair:
        print(describe_host())
        names_pair(args.runs, args.threads, args.gguf)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    torch.set_num_threads(1)
    print(describe_host() + "; 1 thread")
    print(f"{'model':>14} {'handler':>28} {'median ms':>10} {'p95 ms':>8}")
    tokenizer = CharTokenizer(ALPHABET)
    for n_embd in args.widths:
        config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=256, n_layer=N_LAYER, n_head=N_HEAD,
                           n_embd=n_embd)
        handlers = handlers_with_model(config, tokenizer, TEXT)
        for name, call in calls(handlers).items():
            try:
                median, p95 = timed(call, args.runs)
            except gr.Error as refused:  # past the public server's caps: what a learner is told
                print(f"{f'{N_LAYER}x{N_HEAD}x{n_embd}':>14} {name:>28}    refused: {refused.message}")
                continue
            print(f"{f'{N_LAYER}x{N_HEAD}x{n_embd}':>14} {name:>28} {median:10.1f} {p95:8.1f}")
    if args.gpt2_runs:
        gpt2(args.gpt2_runs)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
