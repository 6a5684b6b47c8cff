"""The seeds' ladder: does each rung lower the loss as in Karpathy's lecture?

    python tests/bench/bench_ladder.py                       # 2 seeds x 10,000 steps, then the app's stages
    python tests/bench/bench_ladder.py --steps 2000 --seeds 1 --skip-app
    python tests/bench/bench_ladder.py --skip-lecture              # the app's stages only

Part 1, the lecture's sizes: `python -m core ladder --json` for each seed, the seeds side by side in
their own processes (one thread each), every stage's validation loss beside the lecture's figure.
Part 2, the app's Stage dropdown on the default Tiny Shakespeare preset (shakespeare-char-cpu,
2,000 steps): each stage's options over the preset, as the Train tab builds it.

Then the issue's checks, each printed with PASS or FAIL: bigram <= 2.50, one head <= 2.40, four
heads <= 2.25, every rung with attention at least 0.03 below the rung before it (mean of the seeds);
on the app's stages, none within 0.5 of ln V and each rung with attention below the one before.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.config import STAGES  # noqa: E402

APP_PRESET = "shakespeare-char-cpu"
CEILINGS = {"bigram": 2.50, "one_head": 2.40, "multi_head": 2.25}  # the bars at the lecture's sizes
MIN_GAIN = 0.03  # each rung with attention, below the rung before it


def run_ladder(steps: int, seed: int) -> dict[str, dict]:
    """One `python -m core ladder --json` run in its own single-threaded process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "core", "ladder", "--steps", str(steps), "--seed", str(seed),
                          "--json", "--device", "cpu"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return {row["stage"]: row for row in map(json.loads, out.stdout.splitlines())}


def run_app_stage(stage: str, steps: int | None) -> dict:
    """One stage over the app's default Tiny Shakespeare preset, in its own single-threaded process."""
    code = (
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from core.config import STAGES\nfrom core.data import TokenData\nfrom core.model import GPT\n"
        "from core.presets import preset_configs, preset_corpus\nfrom core.train import Trainer\n"
        f"text, tok = preset_corpus({APP_PRESET!r})\n"
        f"overrides = {{**STAGES[{stage!r}].options, **({{'max_iters': {steps}}} if {steps!r} else {{}})}}\n"
        f"model_config, train_config = preset_configs({APP_PRESET!r}, tok.vocab_size, device='cpu', **overrides)\n"
        "torch.manual_seed(train_config.seed)\nmodel = GPT(model_config)\n"
        "trainer = Trainer(model, TokenData.from_text(text, tok, model_config.block_size), train_config)\n"
        "final = [e for e in trainer.run() if e.val_loss is not None][-1]\n"
        "print(json.dumps({'val_loss': final.val_loss, 'params': model.parameter_counts()['total'],"
        " 'seconds': trainer.elapsed, 'vocab_size': model_config.vocab_size}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the {stage} stage failed:\n{out.stderr}")
    return json.loads(out.stdout)


def check(name: str, ok: bool) -> bool:
    print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return ok


def communication_gains(losses: dict[str, float]) -> list[tuple[str, str, float]]:
    """(rung, the rung before, how much lower) for each rung with attention."""
    order = list(STAGES)
    return [(b, a, losses[a] - losses[b]) for a, b in zip(order, order[1:]) if STAGES[b].options["use_attention"]]


def lecture_part(steps: int, seeds: list[int]) -> bool:
    print(f"Lecture's sizes: {steps:,} steps per stage, seeds {seeds}")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(seeds, pool.map(lambda seed: run_ladder(steps, seed), seeds)))
    print(f"  ({time.perf_counter() - started:.0f} s wall)")
    header = f"  {'stage':14} {'params':>7} " + " ".join(f"{f'seed {s}':>10}" for s in seeds)
    print(header + f" {'mean':>7} {'lecture':>8} {'s/seed':>7}")
    means = {}
    for stage in STAGES:
        losses = [runs[seed][stage]["val_loss"] for seed in seeds]
        means[stage] = statistics.mean(losses)
        lecture = STAGES[stage].lecture_loss
        seconds = statistics.mean(runs[seed][stage]["seconds"] for seed in seeds)
        print(f"  {stage:14} {runs[seeds[0]][stage]['params']:>7,} " + " ".join(f"{loss:>10.4f}" for loss in losses)
              + f" {means[stage]:>7.4f} {'-' if lecture is None else f'{lecture:.2f}':>8} {seconds:>7.1f}")
    ok = all([check(f"{stage} <= {ceiling} on every seed ({max(runs[s][stage]['val_loss'] for s in seeds):.4f})",
                    all(runs[s][stage]["val_loss"] <= ceiling for s in seeds))
              for stage, ceiling in CEILINGS.items()])
    for rung, before, gain in communication_gains(means):
        ok &= check(f"{rung} {gain:.4f} below {before} (at least {MIN_GAIN})", gain >= MIN_GAIN)
    return ok


def app_part(steps: int | None) -> bool:
    print(f"\nThe app's Stage dropdown on {APP_PRESET} ({'its own steps' if steps is None else f'{steps:,} steps'})")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(STAGES, pool.map(lambda stage: run_app_stage(stage, steps), STAGES)))
    print(f"  ({time.perf_counter() - started:.0f} s wall)")
    print(f"  {'stage':14} {'params':>8} {'val loss':>9} {'seconds':>8}")
    for stage, result in results.items():
        print(f"  {stage:14} {result['params']:>8,} {result['val_loss']:>9.4f} {result['seconds']:>8.1f}")
    guessing = math.log(next(iter(results.values()))["vocab_size"])
    losses = {stage: result["val_loss"] for stage, result in results.items()}
    ok = check(f"no stage within 0.5 of ln V = {guessing:.3f} (highest {max(losses.values()):.4f})",
               max(losses.values()) < guessing - 0.5)
    for rung, before, gain in communication_gains(losses):
        ok &= check(f"{rung} {gain:.4f} below {before}", gain > 0)
    gain = losses["bigram"] - losses["positions"]
    print(f"  note  positions vs bigram: {gain:+.4f} (no communication yet: no gain is expected)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000, help="steps per stage at the lecture's sizes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1337, 1])
    parser.add_argument("--app-steps", type=int, help="steps per stage on the app's preset (default: the preset's)")
    parser.add_argument("--skip-app", action="store_true")
    parser.add_argument("--skip-lecture", action="store_true")
    args = parser.parse_args()
    ok = True if args.skip_lecture else lecture_part(args.steps, args.seeds)
    if not args.skip_app:
        ok &= app_part(args.app_steps)
    print("\nall checks pass" if ok else "\nsome checks FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
