"""Training throughput and quality on a preset (default: nanoGPT's CPU recipe, shakespeare-char-cpu).

Each measurement runs in its own process (fresh compile caches, honest peak memory), and the
variants are interleaved A, B, A, B... so that load from other work hits them alike.

    # quick A/B of speed variants, 300 steps each, 3 rounds (medians of per-step times)
    python tests/bench/bench_train.py --variants fp32,bf16,compile,compile-bf16 --iters 300 --repeats 3
    # the full recipe: 2000 steps, validation loss at 2000, wall time, peak memory
    python tests/bench/bench_train.py --variants bf16 --iters 2000 --repeats 2
    # on a GPU: nanoGPT's GPU recipe until validation loss reaches 1.48, timed from process launch
    python tests/bench/bench_train.py --preset shakespeare-char --device cuda --variants bf16,compile-bf16 \
        --iters 2500 --repeats 1 --target-loss 1.48 --stop-at-target
    # DDP: each run launched by torchrun on 1 and on 2 processes (0: a plain process), the same global batch
    python tests/bench/bench_train.py --variants fp32 --ddp 0,1,2 --iters 300 --repeats 3

Prints one line per run and a summary per variant: median ms/iter (evaluation steps excluded),
tokens/s, the spread of the per-run medians, first-step time (includes compilation), wall time,
peak RSS (and peak GPU memory) and the final validation loss, both as the trainer estimates it
(the preset's number of fixed batches, like nanoGPT's random ones) and over the whole validation
split (every block-sized window, no noise). With --target-loss, also the wall time from launching
the process (Python start, imports, data, compilation and evaluations included) to the first
evaluation at or below that loss. With --ddp, tokens/s counts the global batch (all processes),
and the memory is process 0's.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from host import describe_host  # this script's folder is on sys.path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
# Tiny Shakespeare from ../shared/data as in the tests, unless the caller says otherwise.
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))
if TYPE_CHECKING:
    from core.distributed import Processes
VARIANTS = {  # name -> TrainConfig overrides
    "fp32": dict(dtype="float32", compile=False),
    "bf16": dict(dtype="bfloat16", compile=False),
    "compile": dict(dtype="float32", compile=True),
    "compile-bf16": dict(dtype="bfloat16", compile=True),
    # Model choices nanoGPT fixes differently, for quality comparisons across seeds.
    "bf16-untied": dict(dtype="bfloat16", compile=False, tie_weights=False),
    "bf16-bias": dict(dtype="bfloat16", compile=False, bias=True, qkv_bias=True),
}


def worker(preset: str, variant: str, iters: int, threads: int | None, device: str, seed: int | None,
           target_loss: float | None, stop_at_target: bool, launched: float) -> dict | None:
    """One training run in this process, or in this and the other processes torchrun started; returns its
    figures (None in a process other than DDP's process 0). `launched` is the parent's time.time()."""
    from core.distributed import joined

    with joined(device) as processes:
        result = train(preset, variant, iters, threads, device, seed, target_loss, stop_at_target, launched,
                       processes)
    return result if processes.main else None


def train(preset: str, variant: str, iters: int, threads: int | None, device: str, seed: int | None,
          target_loss: float | None, stop_at_target: bool, launched: float, processes: Processes) -> dict:
    import torch

    from core.data import TokenData
    from core.model import GPT
    from core.observers import standard
    from core.presets import get_preset, preset_configs, preset_corpus
    from core.train import Trainer

    if threads:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    text, tokenizer = preset_corpus(preset)
    model_config, train_config = preset_configs(
        preset, tokenizer.vocab_size, max_iters=iters, lr_decay_iters=get_preset(preset).train["lr_decay_iters"],
        device=device, **VARIANTS[variant], **({} if seed is None else {"seed": seed}),
    )
    data = TokenData.from_text(text, tokenizer, model_config.block_size)
    torch.manual_seed(train_config.seed)
    trainer = Trainer(GPT(model_config), data, train_config, observers=standard(train_config), processes=processes)
    step_times, first_step, last, val_loss = [], None, time.perf_counter(), None
    evaluations, reached = [], None
    for event in trainer.run():
        now = time.perf_counter()
        if event.done:
            break
        if first_step is None:
            first_step = now - last
        elif event.val_loss is None:
            step_times.append(now - last)
        last = now
        if event.val_loss is not None:
            val_loss = event.val_loss
            evaluations.append((event.step, round(val_loss, 4), round(time.time() - launched, 2)))
            if target_loss is not None and reached is None and val_loss <= target_loss:
                reached = {"step": event.step, "val_loss": val_loss, "since_launch_s": time.time() - launched}
                if stop_at_target:
                    trainer.stop()
    median = statistics.median(step_times)
    full_val = full_split_loss(trainer.model, trainer.val_data, model_config.block_size) if processes.main else None
    gpu_peak_mb = torch.cuda.max_memory_allocated() / 2**20 if trainer.device.type == "cuda" else None
    return {
        "variant": variant, "iters": trainer.step, "ms_per_iter": 1000 * median,
        "tokens_per_sec": train_config.batch_size * model_config.block_size / median,
        "first_step_s": first_step, "wall_s": time.perf_counter() - started,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "val_loss": val_loss, "full_val_loss": full_val, "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if trainer.device.type == "cuda" else str(trainer.device),
        "gpu_peak_mb": gpu_peak_mb, "seed": train_config.seed, "autocast": str(trainer._amp_dtype), "evaluations": evaluations, "reached": reached,
    }


def full_split_loss(model, data, block_size: int) -> float:
    """Mean loss over every non-overlapping window of a split: no sampling noise, unlike 20 batches."""
    import torch

    n = (len(data) - 1) // block_size
    x = data[: n * block_size].view(n, block_size)
    y = data[1: n * block_size + 1].view(n, block_size)
    model.eval()
    with torch.no_grad():
        losses = [model(xb, yb)[1].item() * len(xb) for xb, yb in zip(x.split(256), y.split(256))]
    return sum(losses) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="shakespeare-char-cpu")
    parser.add_argument("--variants", default="fp32,bf16", help=f"comma-separated, from {list(VARIANTS)}")
    parser.add_argument("--iters", type=int, default=300, help="steps per run (the lr schedule stays the preset's)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant, interleaved")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--seeds", help="comma-separated seeds, one run each per variant and round "
                        "(default: the preset's seed)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (default 1: timings need a quiet CPU)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto (default: cpu)")
    parser.add_argument("--target-loss", type=float, help="report the wall time to this validation loss")
    parser.add_argument("--stop-at-target", action="store_true", help="end a run once it reaches --target-loss")
    parser.add_argument("--ddp", help="comma-separated numbers of processes: each run is launched by torchrun with "
                        "that many (DDP, one share of the global batch each; 0: a plain process), e.g. 0,1,2")
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        result = worker(args.preset, args.worker, args.iters, args.threads, args.device,
                        int(args.seeds) if args.seeds else None, args.target_loss, args.stop_at_target, args.launched)
        if result is not None:
            print(json.dumps(result))
        return
    print(describe_host())
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {list(VARIANTS)}")
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.seeds else [None]
    counts = [int(count) for count in args.ddp.split(",")] if args.ddp else [None]
    # A run's name: its variant, and with --ddp its number of processes ("fp32 x2"; "fp32 plain" for 0).
    labels = {(variant, count): variant if count is None else f"{variant} {f'x{count}' if count else 'plain'}"
              for variant in variants for count in counts}
    jobs = [(round_, variant, count, seed) for round_ in range(args.repeats) for variant in variants
            for count in counts for seed in seeds]
    results: dict[str, list[dict]] = {label: [] for label in labels.values()}

    def run_job(job: tuple[int, str, int | None, int | None]) -> tuple[int, str, dict]:
        round_, variant, count, seed = job
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={count}"]
        command = (torchrun if count else [sys.executable]) + [
            __file__, "--worker", variant, "--preset", args.preset, "--iters", str(args.iters),
            "--device", args.device, "--launched", repr(time.time())]
        if args.threads:
            command += ["--threads", str(args.threads)]
        if seed is not None:
            command += ["--seeds", str(seed)]
        if args.target_loss is not None:
            command += ["--target-loss", str(args.target_loss)] + ["--stop-at-target"] * args.stop_at_target
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        return round_, labels[variant, count], json.loads(done.stdout.strip().splitlines()[-1])

    # --parallel > 1 only where cores are plentiful (a GPU host): runs side by side share the CPU.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for round_, variant, result in pool.map(run_job, jobs):
            results[variant].append(result)
            print(f"round {round_ + 1} {variant:13} seed {result['seed']:5} {result['ms_per_iter']:6.1f} ms/iter "
                  f"{result['tokens_per_sec']:8,.0f} tok/s  first step {result['first_step_s']:5.1f} s  "
                  f"wall {result['wall_s']:6.1f} s  peak RSS {result['peak_rss_mb']:5.0f} MB  "
                  f"val loss {result['val_loss']:.4f} (whole split {result['full_val_loss']:.4f})  "
                  f"[{result['autocast']}]", flush=True)
            if result["gpu_peak_mb"] is not None:
                print(f"    on {result['device']}: peak GPU memory {result['gpu_peak_mb']:.0f} MB")
            print(f"    evaluations (step, val loss, s since launch): {result['evaluations']}")
            if args.target_loss is not None:
                reached = result["reached"]
                print(f"    validation loss <= {args.target_loss}: " + (
                    f"{reached['val_loss']:.4f} at step {reached['step']}, {reached['since_launch_s']:.1f} s after launch"
                    if reached else "not reached"), flush=True)

    first = next(iter(results))
    print(f"\n{args.preset}, {args.iters} steps, {args.repeats} interleaved runs per variant")
    baseline = statistics.median(r["ms_per_iter"] for r in results[first])
    for variant, runs in results.items():
        ms = [r["ms_per_iter"] for r in runs]
        median = statistics.median(ms)
        print(f"{variant:13} median {median:6.1f} ms/iter (runs {min(ms):.1f}-{max(ms):.1f}), "
              f"{statistics.median(r['tokens_per_sec'] for r in runs):8,.0f} tok/s, "
              f"{baseline / median:4.2f}x {first}, {runs[0]['threads']} thread(s) a process, "
              f"wall {statistics.median(r['wall_s'] for r in runs):6.1f} s, "
              f"peak RSS {max(r['peak_rss_mb'] for r in runs):5.0f} MB, "
              f"val loss {', '.join(format(r['val_loss'], '.4f') for r in runs)} "
              f"(whole split {', '.join(format(r['full_val_loss'], '.4f') for r in runs)})")
        if len(runs) > 1:
            full = [r["full_val_loss"] for r in runs]
            print(f"{'':13} whole-split val loss over {len(runs)} runs: mean {statistics.mean(full):.4f}, "
                  f"sd {statistics.stdev(full):.4f}, min {min(full):.4f}, max {max(full):.4f}")


if __name__ == "__main__":
    main()
