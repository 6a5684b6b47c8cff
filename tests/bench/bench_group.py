"""One round of training steps for N learners of the default task: one after another vs stacked (core.group).

    python tests/bench/bench_group.py                          # CPU, N in 1, 10, 60
    python tests/bench/bench_group.py --device cuda --sizes 1,10,60,300,1000
    python tests/bench/bench_group.py --threads 2 --rounds 5   # as the two-core Space runs

Each learner is the `repeat` preset's model with its own seed and batch. A round is one optimizer step
of every learner: with `Trainer.gradient_step` one trainer after another (the app today), or with one
`core.group.stacked_step` over all of them. Batches are drawn before the clock starts; both sides
take the same steps. Prints the host, then per N the median ms per round of each and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from host import describe_host  # this script's folder is on sys.path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))

import torch  # noqa: E402

from core.data import TokenData  # noqa: E402
from core.group import stacked_step  # noqa: E402
from core.model import GPT  # noqa: E402
from core.presets import preset_configs, preset_corpus  # noqa: E402
from core.train import Trainer  # noqa: E402

PRESET = "repeat"


def learners(n: int, device: str, dtype: str) -> list[Trainer]:
    text, tokenizer = preset_corpus(PRESET)
    model_config, train_config = preset_configs(PRESET, tokenizer.vocab_size, device=device, dtype=dtype)
    data = TokenData.from_text(text, tokenizer, model_config.block_size)
    trainers = []
    for seed in range(n):
        model = GPT(model_config, generator=torch.Generator().manual_seed(seed))
        config = type(train_config)(**{**train_config.to_dict(), "seed": seed})
        trainers.append(Trainer(model, data, config))
    return trainers


def timed(round_of_steps, device: str, rounds: int) -> float:
    """Median milliseconds of `rounds` calls (after one untimed warm-up)."""
    times = []
    for i in range(rounds + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        round_of_steps()
        if device == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(n: int, device: str, dtype: str, rounds: int) -> tuple[float, float]:
    trainers = learners(n, device, dtype)
    lr = trainers[0].config.learning_rate
    batches = [[t.batch() for t in trainers] for _ in range(2 * (rounds + 1))]
    queue = iter(batches)

    def one_after_another() -> None:
        for trainer, (x, y) in zip(trainers, next(queue)):
            Trainer.gradient_step(trainer, x, y, lr)

    def stacked() -> None:
        stacked_step([(trainer, x, y, lr) for trainer, (x, y) in zip(trainers, next(queue))])

    return timed(one_after_another, device, rounds), timed(stacked, device, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,60", help="numbers of learners, comma-separated")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", help="TrainConfig.dtype: float32, bfloat16 or auto")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per measurement (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device here")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe_host())
    if args.device == "cuda":
        print(f"device: {torch.cuda.get_device_name()}")
    print(f"preset {PRESET}, dtype {args.dtype}, {torch.get_num_threads()} threads, median of {args.rounds} rounds")
    for n in (int(size) for size in args.sizes.split(",")):
        alone, together = measure(n, args.device, args.dtype, args.rounds)
        print(f"N={n:5d}: one after another {alone:9.1f} ms/round, stacked {together:8.1f} ms/round, "
              f"{alone / together:5.2f}x")


if __name__ == "__main__":
    main()
