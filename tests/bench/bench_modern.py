"""Today's parts: what each does to the loss and the speed, the Ladder's last rung, and SmolLM2 in the app.

    python tests/bench/bench_modern.py                         # all three parts (about an hour on 2 cores)
    python tests/bench/bench_modern.py --part parts --seeds 1337 1 2
    python tests/bench/bench_modern.py --part ladder --ladder-seeds 1337 1 2 3 4
    python tests/bench/bench_modern.py --part smollm2

Part `parts`: the `shakespeare-char-cpu` preset (4 layers, 4 heads, 128 channels, context 64, 2,000
steps) as GPT, as `llama-style`, and with each of today's parts alone (VARIANTS), on the same seeds:
same batches, same evaluation batches, so the differences are paired. Every run has its own process
and one thread, `--parallel` at a time: the tokens/s are one core's.

Part `ladder`: the Ladder tab exactly as a learner gets it (its steps, learning rate and seed list
come from `playground.tabs.ladder.new_ladder`), on several seeds. Check: every rung with attention
below the rung before it on every seed.

Part `smollm2`: the Attention tab's server time for a SmolLM2-135M (its config: 30 layers of 9 query
heads sharing 3 key/value heads, 576 channels, a 49,152-token vocabulary) on 64 tokens, all 270 heads.
The weights are random (nothing can be downloaded here; trained weights cost the same time) and the
tokenizer is a byte-level BPE trained on Tiny Shakespeare in the script.

Every timing is printed beside this host's speed (a fixed matrix product, GFLOP/s on one thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from host import describe_host  # noqa: E402

BASE = "shakespeare-char-cpu"
# name -> (preset, overrides): each part of today's block alone on the CPU recipe, then all of them.
VARIANTS: dict[str, tuple[str, dict]] = {
    "gpt": (BASE, {}),
    "rope": (BASE, {"position": "rope"}),
    "alibi": (BASE, {"position": "alibi"}),
    "rmsnorm": (BASE, {"norm": "rmsnorm"}),
    "swiglu": (BASE, {"activation": "swiglu"}),
    "gqa (2 kv heads)": (BASE, {"n_kv_head": 2}),
    "window 16": (BASE, {"window": 16}),
    "llama-style": ("llama-style", {}),
}
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
               tie_word_embeddings=True)
SMOLLM2_TOKENS = 64


def train_variant(name: str, seed: int, steps: int) -> dict:
    """One run of a variant (in its own process, one thread): final validation loss, tokens/s, size."""
    torch.set_num_threads(1)
    from core.data import TokenData
    from core.model import GPT
    from core.presets import preset_configs, preset_corpus
    from core.train import Trainer

    preset, overrides = VARIANTS[name]
    text, tokenizer = preset_corpus(preset)
    model_config, train_config = preset_configs(preset, tokenizer.vocab_size, device="cpu", seed=seed,
                                                max_iters=steps, **overrides)
    model = GPT(model_config, generator=torch.Generator().manual_seed(seed))
    trainer = Trainer(model, TokenData.from_text(text, tokenizer, model_config.block_size), train_config)
    final = [event for event in trainer.run() if event.val_loss is not None][-1]
    tokens = steps * train_config.batch_size * model_config.block_size
    return {"val_loss": final.val_loss, "tokens_per_s": tokens / trainer.elapsed,
            "params": model.parameter_counts()["total"]}


def parts(seeds: list[int], steps: int, parallel: int) -> bool:
    print(f"## Each part alone on {BASE} ({steps:,} steps, seeds {seeds}, {parallel} runs at a time, 1 thread each)")
    jobs = [(name, seed) for seed in seeds for name in VARIANTS]
    started = time.perf_counter()
    with ProcessPoolExecutor(parallel, mp_context=get_context("spawn")) as pool:
        results = dict(zip(jobs, pool.map(train_variant, *zip(*jobs), [steps] * len(jobs))))
    print(f"({time.perf_counter() - started:.0f} s wall)\n")
    print(f"| variant | params | {' | '.join(f'seed {s}' for s in seeds)} | mean | vs gpt (paired) | tokens/s |")
    print(f"|---|---:|{'---:|' * len(seeds)}---:|---:|---:|")
    for name in VARIANTS:
        runs = [results[name, seed] for seed in seeds]
        losses = [run["val_loss"] for run in runs]
        gains = [run["val_loss"] - results["gpt", seed]["val_loss"] for seed, run in zip(seeds, runs)]
        spread = f" +- {statistics.stdev(gains):.3f}" if len(gains) > 1 else ""
        print(f"| {name} | {runs[0]['params']:,} | {' | '.join(f'{loss:.4f}' for loss in losses)} | "
              f"{statistics.mean(losses):.4f} | {statistics.mean(gains):+.4f}{spread} | "
              f"{statistics.median(run['tokens_per_s'] for run in runs):,.0f} |")
    better = all(results["llama-style", s]["val_loss"] < results["gpt", s]["val_loss"] for s in seeds)
    print(f"\n{'PASS' if better else 'FAIL'}  llama-style below gpt on every seed")
    return better


def climb(seed: int) -> dict[str, float]:
    """The Ladder tab's climb on one seed (its own process, one thread): each rung's validation loss."""
    torch.set_num_threads(1)
    from playground.tabs.ladder import new_ladder, shakespeare_data

    ladder = new_ladder(*shakespeare_data(), seed=seed)
    for _ in ladder.climb():
        pass
    return {rung.stage: rung.val_loss for rung in ladder.rungs} | {"seconds": sum(r.seconds for r in ladder.rungs)}


def ladder(seeds: list[int], parallel: int) -> bool:
    from core.ladder import RUNGS
    from playground.tabs.ladder import DEFAULT_STEPS, new_ladder, shakespeare_data

    settings = new_ladder(*shakespeare_data(), seed=0).configs("gpt")[1]
    print(f"\n## The Ladder tab at its defaults: {DEFAULT_STEPS:,} steps per rung, learning rate "
          f"{settings.learning_rate:g} to {settings.min_lr:g}, batches of {settings.batch_size}, seeds {seeds}")
    started = time.perf_counter()
    with ProcessPoolExecutor(parallel, mp_context=get_context("spawn")) as pool:
        runs = dict(zip(seeds, pool.map(climb, seeds)))
    print(f"({time.perf_counter() - started:.0f} s wall; one climb "
          f"{statistics.median(run['seconds'] for run in runs.values()):.0f} s of training on one thread)\n")
    print(f"| rung | {' | '.join(f'seed {s}' for s in seeds)} | lecture |")
    print(f"|---|{'---:|' * len(seeds)}---:|")
    for stage, rung in RUNGS.items():
        lecture = "" if rung.lecture_loss is None else f"{rung.lecture_loss:.2f}"
        print(f"| {stage} | {' | '.join(f'{runs[s][stage]:.4f}' for s in seeds)} | {lecture} |")
    ok, order = True, list(RUNGS)
    for before, stage in zip(order, order[1:]):
        if not RUNGS[stage].options["use_attention"]:
            continue
        gains = [runs[s][before] - runs[s][stage] for s in seeds]
        passed = min(gains) > 0
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {stage} below {before} on every seed: by {min(gains):.3f} to "
              f"{max(gains):.3f}")
    return ok


def smollm2(threads: list[int]) -> None:
    import gradio as gr
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from core.data import load_shakespeare
    from playground.context import AppContext
    from playground.model_picker import ModelPicker
    from playground.sessions import SessionRegistry
    from playground.settings import Settings
    from playground.tabs.attention import AttentionHandlers

    print(f"\n## SmolLM2-135M's shape (random weights) in the Attention tab, {SMOLLM2_TOKENS} tokens")
    with tempfile.TemporaryDirectory(prefix="smollm2-random-") as folder:
        torch.manual_seed(0)
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2)).save_pretrained(folder)
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        bpe.train_from_iterator([load_shakespeare()], trainers.BpeTrainer(vocab_size=8000, show_progress=False))
        bpe.save(str(Path(folder) / "tokenizer.json"))
        with gr.Blocks():
            ctx = AppContext(settings=Settings(smollm2_weights=folder), registry=SessionRegistry(10**9, 3600.0),
                             model_changed=gr.Textbox(), tabs=gr.Tabs())
        started = time.perf_counter()
        ModelPicker(ctx).use_model("smollm2", "bench")
        print(f"load: {time.perf_counter() - started:.1f} s")
        shared = ctx.pretrained["smollm2"].get()
        ids = shared.tokenizer.encode(load_shakespeare()[:2000])[:SMOLLM2_TOKENS]
        text = shared.tokenizer.decode(ids)
        attention = AttentionHandlers(ctx)
        config = shared.model.config
        for n in threads:
            torch.set_num_threads(n)
            times = []
            for _ in range(3):
                started = time.perf_counter()
                outputs = attention.analysis.analyse(text, "bench")
                payload = sum(len(out.to_json()) for out in outputs if hasattr(out, "to_json"))  # as Gradio sends
                times.append(time.perf_counter() - started)
            print(f"analyse, {config.n_layer * config.n_head} heads at {len(ids)} tokens, {n} thread(s): median "
                  f"{statistics.median(times):.2f} s of 3 (min {min(times):.2f}), figures {payload / 1e6:.2f} MB JSON")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["parts", "ladder", "smollm2"], nargs="+",
                        default=["parts", "ladder", "smollm2"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1337, 1, 2], help="for the parts")
    parser.add_argument("--steps", type=int, default=2000, help="for the parts")
    parser.add_argument("--ladder-seeds", type=int, nargs="+", default=[1337, 1, 2, 3, 4])
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time (one thread each)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="for the SmolLM2 timing")
    args = parser.parse_args()
    print(describe_host() + "\n")
    ok = True
    if "parts" in args.part:
        ok &= parts(args.seeds, args.steps, args.parallel)
    if "ladder" in args.part:
        ok &= ladder(args.ladder_seeds, args.parallel)
    if "smollm2" in args.part:
        smollm2(args.threads)
    print("\nall checks pass" if ok else "\nsome checks FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
