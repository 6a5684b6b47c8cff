"""Load benchmark of the running app, measured from outside through its API (gradio_client).

    .venv/bin/python tests/bench/bench_load.py [--trainers 10] [--sessions 30] [--generations 5]

Starts `python -m playground` on a free port in a subprocess and prints:
1. time from a /train call to its first streamed update, and to the first update whose loss chart
   has a point (what a user sees after clicking Train), for the default preset;
2. latency of /generate (first streamed tokens, and the whole call) alone, then while N other
   sessions train the default preset;
3. the server's resident memory (RSS) empty, then holding M sessions that each trained a model.
Figures depend on the machine and on whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import socket
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gradio_client import Client

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.conftest import free_port  # noqa: E402
# The default preset's form, shortened: what a user who only presses Train gets, minus waiting.
TRAIN_DEFAULTS = dict(preset="repeat", corpus="repeat", tokenizer="char", stage="gpt", n_layer=2, n_head=4,
                      n_embd=64, block_size=32, dropout=0.0, steps=600, batch_size=32, learning_rate=3e-3,
                      seed=1337, warmup=50, eval_interval=100, weight_decay=0.01, grad_clip=1.0)
GENERATE = ("abcdefgh|", 50, 0.8, 0, 1.0, None)  # prompt, max tokens, temperature, top-k, top-p, seed


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_server(port: int, max_sessions: int) -> subprocess.Popen:
    env = dict(os.environ, PLAYGROUND_MAX_SESSIONS=str(max_sessions))
    server = subprocess.Popen([sys.executable, "-m", "playground", "--port", str(port)], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not start")


def loss_points(plot) -> int:
    """How many training-loss points a streamed gr.Plot value holds."""
    if not isinstance(plot, dict) or "plot" not in plot:
        return 0
    return len(json.loads(plot["plot"])["data"][0].get("x", []))


def time_to_first_chart(url: str) -> tuple[float, float]:
    client = Client(url, verbose=False)
    started = time.monotonic()
    job = client.submit(**TRAIN_DEFAULTS, api_name="/train")
    first_update = first_point = None
    while first_point is None:
        outputs = job.outputs()
        now = time.monotonic() - started
        if outputs and first_update is None:
            first_update = now
        if outputs and loss_points(outputs[-1][2]):
            first_point = now
        if job.done() and first_point is None:
            raise RuntimeError(f"training ended without a chart update: {job.exception()}")
        time.sleep(0.005)
    client.predict(api_name="/stop")
    job.result()
    return first_update, first_point


def generate_latency(client: Client, n: int) -> tuple[list[float], list[float]]:
    """(time to the first streamed tokens, time for the whole call) of n /generate calls."""
    firsts, totals = [], []
    for _ in range(n):
        started = time.monotonic()
        job = client.submit(*GENERATE, api_name="/generate")
        first = None
        while not job.done():
            if first is None and job.outputs():
                first = time.monotonic() - started
            time.sleep(0.005)
        job.result()
        totals.append(time.monotonic() - started)
        firsts.append(first if first is not None else totals[-1])
    return firsts, totals


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainers", type=int, default=10, help="sessions training while /generate is timed")
    parser.add_argument("--sessions", type=int, default=30, help="sessions holding a trained model for the RSS figure")
    parser.add_argument("--generations", type=int, default=5, help="/generate calls per measurement")
    args = parser.parse_args()

    port = free_port()
    server = start_server(port, max_sessions=max(60, args.sessions + args.trainers + 5))
    url = f"http://127.0.0.1:{port}/"
    try:
        print(f"server pid {server.pid} on {url}; {os.cpu_count()} CPU cores")
        rss_empty = rss_mb(server.pid)
        print(f"RSS, no sessions: {rss_empty:.0f} MB")

        first_update, first_point = time_to_first_chart(url)
        print(f"Train -> first streamed update: {first_update * 1000:.0f} ms; "
              f"-> first loss point on the chart: {first_point * 1000:.0f} ms")

        generator = Client(url, verbose=False)
        generator.predict(**{**TRAIN_DEFAULTS, "steps": 100}, api_name="/train")
        firsts, totals = generate_latency(generator, args.generations)
        print(f"/generate (50 tokens), idle server: first tokens {summary(firsts)}; whole call {summary(totals)}")

        trainers = [Client(url, verbose=False) for _ in range(args.trainers)]
        jobs = [c.submit(**{**TRAIN_DEFAULTS, "steps": 5000}, api_name="/train") for c in trainers]
        time.sleep(3)  # the first trainings are running, the others wait in the queue
        firsts, totals = generate_latency(generator, args.generations)
        print(f"/generate (50 tokens) while {args.trainers} sessions train: first tokens {summary(firsts)}; "
              f"whole call {summary(totals)}")
        started = time.monotonic()
        generator.predict("sort", api_name="/preset")
        print(f"/preset (a cheap event) while they train: {(time.monotonic() - started) * 1000:.0f} ms")
        for job in jobs:
            job.cancel()  # the queued ones
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda c: c.predict(api_name="/stop"), trainers))
        for job in jobs:
            try:
                job.result(timeout=120)
            except Exception:  # a cancelled job
                pass

        def train_one(_):
            Client(url, verbose=False).predict(**{**TRAIN_DEFAULTS, "steps": 20}, api_name="/train")

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(train_one, range(args.sessions)))
        print(f"RSS with {args.sessions} more sessions holding a trained default model "
              f"(plus the {args.trainers + 2} above): {rss_mb(server.pid):.0f} MB "
              f"(+{rss_mb(server.pid) - rss_empty:.0f} MB)")
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
