r"""Training throughput and quality on a preset (default: nanoGPT's CPU recipe, shakespeare-char-cpu).

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
    # beside nanoGPT's own train.py (DIR: a copy of karpathy/nanoGPT, unchanged), ours, nanoGPT, ours, nanoGPT...
    python tests/bench/bench_train.py --preset shakespeare-char --device cuda --variants bf16 --seeds 1337,2 \
        --iters 2500 --repeats 1 --target-loss 1.48 --stop-at-target --nanogpt DIR
    python tests/bench/bench_train.py --variants fp32 --iters 2000 --repeats 2 --nanogpt DIR

Prints one line per run and a summary per variant: median ms/iter (evaluation steps excluded),
tokens/s, the spread of the per-run medians, first-step time (includes compilation), wall time,
peak RSS (and peak GPU memory) and the final validation loss, both as the trainer estimates it
(the preset's number of fixed batches, like nanoGPT's random ones) and over the whole validation
split (every block-sized window, no noise). With --target-loss, also the wall time from launching
the process (Python start, imports, data, compilation and evaluations included) to the first
evaluation at or below that loss. With --ddp, tokens/s counts the global batch (all processes),
and the memory is process 0's. Under each run, the seconds from its launch to its phases: imports
done, corpus and data ready, model built, Trainer ready (model on the device, optimizer made),
first step done, first evaluation done.

With --nanogpt DIR, nanoGPT's own train.py runs from DIR after ours in each round and seed, in its
own process, on its recipe for the preset (its config file, and for shakespeare-char-cpu its
README's CPU overrides; its compile stays on for the GPU recipe), with --iters, --device and
--threads (as OMP_NUM_THREADS) passed on, its out_dir a temporary folder, then --nanogpt-args. Its
figures come from the lines it prints, timed as they arrive: ms/iter over the steps between two
`iter` lines with no evaluation among them (its own printed times, taken before the GPU is done,
are given beside), its evaluations and first step (which includes its step-0 evaluation), its
wall time from launch to exit. It always seeds 1337. Missing data in DIR is made by its own
prepare.py from our corpus (DIR/data/shakespeare_char gets input.txt, train.bin, val.bin and meta.pkl).
The last lines give ours / nanoGPT's tokens/s twice: as the ratio of the medians, and round by round
(each run against nanoGPT's of the same round) with their median, the fairer figure on a host whose
speed changes from run to run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

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
    "bf16-graphs": dict(dtype="bfloat16", compile=False, cuda_graphs=True),  # CUDA only
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

    # Where the time from launch goes (issue 41): seconds since the parent launched this process.
    phases = {"imports": time.time() - launched}
    if threads:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    text, tokenizer = preset_corpus(preset)
    model_config, train_config = preset_configs(
        preset, tokenizer.vocab_size, max_iters=iters, lr_decay_iters=get_preset(preset).train["lr_decay_iters"],
        device=device, **VARIANTS[variant], **({} if seed is None else {"seed": seed}),
    )
    data = TokenData.from_text(text, tokenizer, model_config.block_size)
    phases["data"] = time.time() - launched
    torch.manual_seed(train_config.seed)
    model = GPT(model_config)
    phases["model"] = time.time() - launched
    trainer = Trainer(model, data, train_config, observers=standard(train_config), processes=processes)
    phases["trainer"] = time.time() - launched
    step_times, first_step, last, val_loss = [], None, time.perf_counter(), None
    evaluations, reached = [], None
    for event in trainer.run():
        now = time.perf_counter()
        if event.done:
            break
        if first_step is None:
            first_step = now - last
            phases["first step"] = time.time() - launched
        elif event.val_loss is None:
            step_times.append(now - last)
        last = now
        if event.val_loss is not None:
            phases.setdefault("first evaluation", time.time() - launched)
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
        "gpu_peak_mb": gpu_peak_mb, "seed": train_config.seed, "autocast": str(trainer._amp_dtype),
        "evaluations": evaluations, "reached": reached, "phases": phases,
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


# nanoGPT's own train.py (karpathy/nanoGPT, run unchanged from its folder): its recipe for each preset that copies
# one, as its README gives it. Our `shakespeare-char-cpu` unties the output layer, which nanoGPT always ties.
NANOGPT = "nanoGPT"  # its label among the variants
NANOGPT_RECIPES = {
    "shakespeare-char": ["config/train_shakespeare_char.py"],
    "shakespeare-char-cpu": ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                             "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                             "--n_embd=128", "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0"],
}
NANOGPT_SEED = 1337  # it seeds 1337 + its DDP rank and has no option for another
NANOGPT_ITER = re.compile(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms")
NANOGPT_EVAL = re.compile(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)")
NANOGPT_TOKENS = re.compile(r"tokens per iteration will be: ([\d,]+)")


def prepare_nanogpt(folder: Path) -> None:
    """Its Shakespeare data (train.bin, val.bin, meta.pkl) by its own prepare.py, from our copy of the corpus."""
    data = folder / "data" / "shakespeare_char"
    if (data / "train.bin").exists():
        return
    if not (data / "input.txt").exists():  # prepare.py downloads it only when it is missing
        shutil.copyfile(Path(os.environ["PLAYGROUND_DATA_DIR"]) / "tinyshakespeare" / "input.txt", data / "input.txt")
    with tempfile.TemporaryDirectory() as stand_in:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        if importlib.util.find_spec("requests") is None:  # it imports requests only for the download it skips
            Path(stand_in, "requests.py").write_text('"""Stand-in: prepare.py finds input.txt there."""\n')
            env["PYTHONPATH"] = stand_in
        subprocess.run([sys.executable, "prepare.py"], cwd=data, env=env, check=True, capture_output=True)


def run_nanogpt(folder: Path, preset: str, iters: int, device: str, threads: int | None, extra: list[str],
                target_loss: float | None, stop_at_target: bool) -> dict:
    """One run of nanoGPT's train.py in its own process, timed from its launch by the lines it prints."""
    with tempfile.TemporaryDirectory() as out_dir:
        command = [sys.executable, "-u", "train.py", *NANOGPT_RECIPES[preset], f"--max_iters={iters}",
                   f"--out_dir={out_dir}", *([f"--device={device}"] if device != "auto" else []), *extra]
        # -u: its lines come as it prints them; no __pycache__ in its folder; --threads as torch reads it.
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
        launched = time.time()
        process = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        logged, evaluations, reached, tokens, output, stopped, imported = [], [], None, None, [], False, None
        for line in process.stdout:
            now = time.time() - launched
            output.append(line)
            if match := NANOGPT_TOKENS.match(line):
                tokens, imported = int(match[1].replace(",", "")), now  # printed once its imports and config are done
            elif match := NANOGPT_ITER.match(line):
                logged.append((int(match[1]), now, float(match[2])))
            elif match := NANOGPT_EVAL.match(line):
                step, val_loss = int(match[1]), float(match[2])
                evaluations.append([step, val_loss, round(now, 2)])
                if target_loss is not None and reached is None and val_loss <= target_loss:
                    reached = {"step": step, "val_loss": val_loss, "since_launch_s": now}
                    if stop_at_target:
                        process.kill()
                        stopped = True
        _, status, usage = os.wait4(process.pid, 0)  # its own peak RSS, not all children's
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.time() - launched
    if process.returncode and not stopped:
        raise RuntimeError(f"nanoGPT's train.py failed ({process.returncode}):\n{''.join(output[-30:])}")
    return nanogpt_figures(logged, evaluations, tokens) | {
        "variant": NANOGPT, "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "full_val_loss": None,
        "threads": threads, "device": device, "gpu_peak_mb": None, "seed": NANOGPT_SEED, "autocast": "its default",
        "reached": reached,
        # It evaluates at step 0, before its first step (whose printed time includes that evaluation).
        "phases": {"imports": imported, "first evaluation": evaluations[0][2] if evaluations else None,
                   "first step": logged[0][1] if logged else None},
    }


def nanogpt_figures(logged: list[tuple[int, float, float]], evaluations: list[list], tokens: int) -> dict:
    """Its steps' times from its `iter` lines: from when each line came, over the steps between two lines with
    no evaluation among them (its own printed time is taken before the GPU is done, so it is given beside)."""
    evaluated = {step for step, _, _ in evaluations}
    spans = [(now - before) / (step - previous) for (previous, before, _), (step, now, _) in zip(logged, logged[1:])
             if not evaluated & set(range(previous + 1, step + 1))]
    median = statistics.median(spans)
    return {
        "iters": logged[-1][0], "ms_per_iter": 1000 * median, "tokens_per_sec": tokens / median,
        "printed_ms_per_iter": statistics.median(ms for step, _, ms in logged if step and step not in evaluated),
        "first_step_s": logged[0][2] / 1000, "val_loss": evaluations[-1][1], "evaluations": evaluations,
    }


def format_loss(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"  # nanoGPT's runs have no whole-split figure


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
    parser.add_argument("--nanogpt", type=Path, metavar="DIR", help="also run nanoGPT's own train.py from DIR (a copy "
                        "of karpathy/nanoGPT, unchanged), interleaved with ours, on its recipe for --preset; it "
                        "always seeds 1337 (it has no seed option), whatever --seeds says")
    parser.add_argument("--nanogpt-args", default="", metavar="ARGS", help="more of its --key=value overrides, after "
                        "its recipe, e.g. --nanogpt-args='--compile=False'")
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        result = worker(args.preset, args.worker, args.iters, args.threads, args.device,
                        int(args.seeds) if args.seeds else None, args.target_loss, args.stop_at_target, args.launched)
        if result is not None:
            print(json.dumps(result))
        return
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {list(VARIANTS)}")
    if args.nanogpt and args.preset not in NANOGPT_RECIPES:
        parser.error(f"nanoGPT has a recipe for {list(NANOGPT_RECIPES)} only")
    from host import describe_host  # this script's folder is on sys.path; it imports torch (not needed for --help)

    print(describe_host())
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.seeds else [None]
    counts = [int(count) for count in args.ddp.split(",")] if args.ddp else [None]
    # A run's name: its variant, and with --ddp its number of processes ("fp32 x2"; "fp32 plain" for 0).
    labels = {(variant, count): variant if count is None else f"{variant} {f'x{count}' if count else 'plain'}"
              for variant in variants for count in counts}
    # nanoGPT's run after ours of the first seed in each round: ours, nanoGPT, ours, nanoGPT... (it has no seed)
    theirs = [(NANOGPT, None)] if args.nanogpt else []
    labels.update({run: NANOGPT for run in theirs})
    jobs = [(round_, variant, count, seed) for round_ in range(args.repeats) for seed in seeds
            for variant, count in [(variant, count) for variant in variants for count in counts]
            + (theirs if seed == seeds[0] else [])]
    results: dict[str, list[dict]] = {label: [] for label in labels.values()}
    if args.nanogpt:
        prepare_nanogpt(args.nanogpt)

    def run_job(job: tuple[int, str, int | None, int | None]) -> tuple[int, str, dict]:
        round_, variant, count, seed = job
        if variant == NANOGPT:
            try:
                return round_, NANOGPT, run_nanogpt(args.nanogpt, args.preset, args.iters, args.device, args.threads,
                                                    shlex.split(args.nanogpt_args), args.target_loss,
                                                    args.stop_at_target)
            except RuntimeError as error:  # the other runs go on
                return round_, NANOGPT, {"failed": str(error)}
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
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:  # the other runs go on: print why this one failed
            return round_, labels[variant, count], {"failed": "\n".join(done.stderr.splitlines()[-15:])}
        return round_, labels[variant, count], json.loads(done.stdout.strip().splitlines()[-1])

    # --parallel > 1 only where cores are plentiful (a GPU host): runs side by side share the CPU.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for round_, variant, result in pool.map(run_job, jobs):
            if "failed" in result:
                print(f"round {round_ + 1} {variant:13} FAILED:\n{result['failed']}", flush=True)
                continue
            results[variant].append({**result, "round": round_})
            print(f"round {round_ + 1} {variant:13} seed {result['seed']:5} {result['ms_per_iter']:6.1f} ms/iter "
                  f"{result['tokens_per_sec']:8,.0f} tok/s  first step {result['first_step_s']:5.1f} s  "
                  f"wall {result['wall_s']:6.1f} s  peak RSS {result['peak_rss_mb']:5.0f} MB  "
                  f"val loss {result['val_loss']:.4f} (whole split {format_loss(result['full_val_loss'])})  "
                  f"[{result['autocast']}]", flush=True)
            if result["gpu_peak_mb"] is not None:
                print(f"    on {result['device']}: peak GPU memory {result['gpu_peak_mb']:.0f} MB")
            print("    s since launch: " + ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in
                                                     result["phases"].items() if seconds is not None))
            if "printed_ms_per_iter" in result:
                print(f"    {NANOGPT}'s own printed time a step (taken before the GPU is done): median "
                      f"{result['printed_ms_per_iter']:.1f} ms")
            print(f"    evaluations (step, val loss, s since launch): {result['evaluations']}")
            if args.target_loss is not None:
                reached = result["reached"]
                print(f"    validation loss <= {args.target_loss}: " + (
                    f"{reached['val_loss']:.4f} at step {reached['step']}, "
                    f"{reached['since_launch_s']:.1f} s after launch" if reached else "not reached"), flush=True)

    results = {variant: runs for variant, runs in results.items() if runs}
    first = next(iter(results))
    print(f"\n{args.preset}, {args.iters} steps, {args.repeats} interleaved runs per variant")
    baseline = statistics.median(r["ms_per_iter"] for r in results[first])
    for variant, runs in results.items():
        ms = [r["ms_per_iter"] for r in runs]
        median = statistics.median(ms)
        print(f"{variant:13} median {median:6.1f} ms/iter (runs {min(ms):.1f}-{max(ms):.1f}), "
              f"{statistics.median(r['tokens_per_sec'] for r in runs):8,.0f} tok/s, "
              f"{baseline / median:4.2f}x {first}, {runs[0]['threads'] or 'default'} thread(s) a process, "
              f"wall {statistics.median(r['wall_s'] for r in runs):6.1f} s, "
              f"peak RSS {max(r['peak_rss_mb'] for r in runs):5.0f} MB, "
              f"val loss {', '.join(format(r['val_loss'], '.4f') for r in runs)} "
              f"(whole split {', '.join(format_loss(r['full_val_loss']) for r in runs)})")
        if len(runs) > 1 and variant != NANOGPT:
            full = [r["full_val_loss"] for r in runs]
            print(f"{'':13} whole-split val loss over {len(runs)} runs: mean {statistics.mean(full):.4f}, "
                  f"sd {statistics.stdev(full):.4f}, min {min(full):.4f}, max {max(full):.4f}")
        if args.target_loss is not None:
            print(f"{'':13} validation loss <= {args.target_loss}: " + ", ".join(
                f"{r['reached']['since_launch_s']:.1f} s after launch" if r["reached"] else "not reached"
                for r in runs))
    nanogpt = results.get(NANOGPT)
    for variant, runs in results.items():
        if nanogpt and variant != NANOGPT:
            speed = statistics.median(r["tokens_per_sec"] for r in runs) / statistics.median(
                r["tokens_per_sec"] for r in nanogpt)
            # Each run against nanoGPT's of the same round: a host whose speed drifts hits a pair alike.
            theirs_by_round = {r["round"]: r["tokens_per_sec"] for r in nanogpt}
            paired = [r["tokens_per_sec"] / theirs_by_round[r["round"]] for r in runs if r["round"] in theirs_by_round]
            difference = statistics.mean(r["val_loss"] for r in runs) - statistics.mean(r["val_loss"] for r in nanogpt)
            print(f"ours / {NANOGPT} tokens/s: {speed:.2f}x as medians, round by round "
                  f"{', '.join(f'{ratio:.2f}x' for ratio in paired)} (median {statistics.median(paired):.2f}x) "
                  f"({variant}); validation loss {difference:+.4f} ({variant}'s mean minus {NANOGPT}'s, each run's "
                  "last evaluation)")


if __name__ == "__main__":
    main()
