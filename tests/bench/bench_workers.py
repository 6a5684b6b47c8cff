"""A room's trainings in one process, without the app: taking turns in threads vs stepping in worker processes.

    python tests/bench/bench_workers.py                         # 60 learners, each way, twice, interleaved
    python tests/bench/bench_workers.py --clients 150 --repeats 1

Each learner is a Trainer of the `repeat` preset (the workshop default: its model, steps and
evaluations, with its own seed) with the observers a run reports through (`core.observers.standard`:
answer scores on evaluation steps, timing), run in a thread of its own, all started at once as a room
presses Train. "turns": every step takes a turn of a `FairShare` of one slot per core (the app's
trainings without worker processes); "workers": the steps go to `core.workers.StepWorkers` (started
and ready before the clock starts, as in a server that has been up for a while). This is the floor
under the app's room (`bench_load.py`), which adds HTTP, streaming, figures and snapshots.

Prints the host, then per way and repeat: seconds from the start to each learner's first step (p50,
p95), to the last learner's end, this process's CPU seconds and the workers' CPU seconds, and the steps the workers took.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from pathlib import Path

from host import cpu_seconds, describe_host  # this script's folder is on sys.path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))

import torch  # noqa: E402

from core.data import TokenData  # noqa: E402
from core.model import GPT  # noqa: E402
from core.observers import standard  # noqa: E402
from core.presets import preset_configs, preset_corpus  # noqa: E402
from core.schedule import FairShare  # noqa: E402
from core.train import Trainer  # noqa: E402
from core.workers import StepWorkers  # noqa: E402

PRESET = "repeat"


def room(n: int, way: str, workers: StepWorkers) -> list[Trainer]:
    text, tokenizer = preset_corpus(PRESET)
    model_config, train_config = preset_configs(PRESET, tokenizer.vocab_size, device="cpu")
    data = TokenData.from_text(text, tokenizer, model_config.block_size, answer_after="|")
    share = FairShare()
    trainers = []
    for seed in range(n):
        config = type(train_config)(**{**train_config.to_dict(), "seed": seed})
        model = GPT(model_config, generator=torch.Generator().manual_seed(seed))
        if way == "turns":
            trainers.append(Trainer(model, data, config, observers=standard(config, share=share)))
        else:
            trainers.append(Trainer(model, data, config, update=workers.update,
                                    observers=[workers.member(), *standard(config)]))
    return trainers


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def measure(n: int, way: str, workers: StepWorkers) -> dict:
    trainers = room(n, way, workers)
    first, last = [None] * n, [None] * n
    steps_before = workers.worker_steps

    def learn(i: int) -> None:
        for event in trainers[i].run():
            if first[i] is None:
                first[i] = time.perf_counter() - start
        last[i] = time.perf_counter() - start

    threads = [threading.Thread(target=learn, args=(i,)) for i in range(n)]
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    pids = [worker.process.pid for worker in workers._workers]
    workers_cpu = sum(map(cpu_seconds, pids))
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    used = resource.getrusage(resource.RUSAGE_SELF)
    return {"first_p50": percentile(first, 50), "first_p95": percentile(first, 95), "done": max(last),
            "cpu": used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime,
            "workers_cpu": sum(map(cpu_seconds, pids)) - workers_cpu,
            "worker_steps": workers.worker_steps - steps_before, "steps": sum(t.step for t in trainers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--ways", default="turns,workers")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(describe_host())
    workers = StepWorkers()
    workers.start(wait=True)
    print(f"preset {PRESET}, {args.clients} learners, {torch.get_num_threads()} torch threads here; "
          f"{workers.processes} workers of {workers.threads} thread(s)")
    for repeat in range(args.repeats):
        for way in args.ways.split(","):
            r = measure(args.clients, way, workers)
            print(f"{way:8s} #{repeat + 1}: first step p50 {r['first_p50']:6.2f} s, p95 {r['first_p95']:6.2f} s; "
                  f"all done {r['done']:7.1f} s; CPU-s {r['cpu']:6.1f} here, {r['workers_cpu']:6.1f} in workers; "
                  f"{r['worker_steps']}/{r['steps']} steps in workers", flush=True)
    workers.close()


if __name__ == "__main__":
    main()
