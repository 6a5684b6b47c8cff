"""Generation speed with and without the KV cache (random weights: speed does not depend on them).

    python tests/bench/bench_generate.py                     # both models, 500 new tokens, 3 rounds
    python tests/bench/bench_generate.py --tokens 500 --repeats 5 --threads 2

Models: nanoGPT's GPU recipe shape (6 layers, 6 heads, 384 channels, context 256) and its CPU
recipe shape (4/4/128, context 64). Three ways, interleaved in each round:
- cache:    core.sample.generate with the KV cache
- no-cache: core.sample.generate re-running the current window for every token
- nanogpt:  nanoGPT's loop for reference: re-run the last block_size tokens for every token
Prints tokens/s per way (median of the rounds, with the spread) and the cache's speed-up.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from core.config import GPTConfig  # noqa: E402
from core.model import GPT  # noqa: E402
from core.sample import generate  # noqa: E402

MODELS = {
    "6/6/384 ctx 256": GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, bias=False,
                                 qkv_bias=False, lm_head_bias=False, tie_weights=True),
    "4/4/128 ctx 64": GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, bias=False,
                                qkv_bias=False, lm_head_bias=False, tie_weights=True),
}


@torch.no_grad()
def nanogpt_generate(model: GPT, idx: torch.Tensor, max_new_tokens: int, generator: torch.Generator) -> torch.Tensor:
    """nanoGPT's generate(): crop to the last block_size tokens, full forward, sample."""
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.config.block_size:])
        probs = F.softmax(logits[:, -1, :], dim=-1)
        idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return idx


def timed(way: str, model: GPT, tokens: int) -> float:
    """Tokens per second for one generation of `tokens` new tokens from a one-token prompt."""
    prompt = torch.zeros(1, 1, dtype=torch.long)
    started = time.perf_counter()
    if way == "nanogpt":
        nanogpt_generate(model, prompt, tokens, torch.Generator().manual_seed(0))
    else:
        generate(model, prompt, tokens, seed=0, use_cache=(way == "cache"))
    return tokens / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--ways", default="cache,no-cache,nanogpt")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ways = args.ways.split(",")
    for name, config in MODELS.items():
        torch.manual_seed(0)
        model = GPT(config).eval()
        timed("cache", model, 20)  # warm-up
        rates = {way: [] for way in ways}
        for _ in range(args.repeats):
            for way in ways:
                rates[way].append(timed(way, model, args.tokens))
        print(f"{name}, {args.tokens} new tokens, {args.repeats} rounds, {torch.get_num_threads()} threads")
        for way, values in rates.items():
            print(f"  {way:9} {statistics.median(values):8.1f} tokens/s (runs {min(values):.1f}-{max(values):.1f})")
        if "cache" in rates and "no-cache" in rates:
            print(f"  KV cache speed-up: {statistics.median(rates['cache']) / statistics.median(rates['no-cache']):.1f}x"
                  " over no-cache", end="")
            if "nanogpt" in rates:
                print(f", {statistics.median(rates['cache']) / statistics.median(rates['nanogpt']):.1f}x over nanoGPT's loop",
                      end="")
            print(flush=True)


if __name__ == "__main__":
    main()
