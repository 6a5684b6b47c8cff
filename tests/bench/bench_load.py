"""Workshop load benchmark (issue 11): N learners press Train at the same moment on one server.

    .venv/bin/python tests/bench/bench_load.py                        # 10, 30, then 60 learners
    .venv/bin/python tests/bench/bench_load.py --clients 2 3 --json   # quick; also one JSON line per N

For each N, measured from outside through the API (gradio_client):
- a fresh `python -m playground` on a free port, with its default memory budget for models (no count
  of models: half the memory free at start) and a state store of its own in a temporary folder;
- N client sessions and one "prober" session that has trained a tiny model, created first (untimed);
- all N call /train at once with no arguments: the form's defaults, what a learner who only
  presses Train gets; meanwhile the prober times light events one at a time, ~0.5 s apart
  (`LIGHT`: /generate of 50 tokens, /preset, /attention; and `RUNS`: a whole /baby_gpt_train), and the
  server's RSS is sampled every 0.5 s.

Prints the machine, then a block per N: time from a learner's press to the first point on its
loss chart (p50, p95, max); the last training's end after the press; each run's own duration
(its first streamed update to its end, p50); light-event latency (p50/p95 per kind and overall);
errors (with the first message); final statuses that are not "Done: ..."; the server's idle RSS,
its peak and its RSS 5 s after the last training. Last, whether the issue's goals hold at the
largest N. Percentiles are nearest-rank (see `percentile`). A learner that never got a chart
point counts as never (infinitely late; null in JSON). Figures depend on the machine and on
whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import math
import operator
import os
import subprocess
import tempfile
import sys
import threading
import time
import urllib.request
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from gradio_client import Client
from gradio_client.client import Job

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.conftest import free_port  # noqa: E402

# Tiny Shakespeare from ../shared/data as in the tests, unless the caller says otherwise.
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))

GENERATE = ("abcdefgh|", 50, 0.8, 0, 1.0, None)  # prompt, max tokens, temperature, top-k, top-p, seed
# What a learner does while others train, timed by the prober (by API name, with its arguments): the
# light events (the goal's "overall" figure: 50 tokens, a preset change, the Attention tab's analysis),
# and a whole Baby GPT training with the tab's defaults (a run, shown beside them, not one of them).
LIGHT = {"generate": GENERATE, "preset": ("sort",), "attention": ("qwhzbkad|qwhzbkad",)}
RUNS = {"baby_gpt_train": ()}
PROBER_STEPS = 30  # enough for /generate to have a model; short, so the prober is ready at once
POLL_S = 0.03  # how often the watcher reads every job's streamed outputs
LIGHT_PAUSE_S = 0.5
RSS_INTERVAL_S = 0.5
SETTLE_S = 5.0  # wait after the last training before the "after" RSS
# The goals, checked at the largest N: (what, result key, comparison, limit).
GOALS = [
    ("first loss point p95 <= 5 s", "first_point_p95_s", operator.le, 5.0),
    ("light events p95 < 1 s", "light_p95_s", operator.lt, 1.0),
    ("all trainings done <= 180 s", "all_done_s", operator.le, 180.0),
    ("no errors", "errors", operator.eq, 0),
    ("RSS peak < 3000 MB", "rss_peak_mb", operator.lt, 3000.0),
]


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it
    (p50 of [1, 2, 3, 4] is 2; p95 of 20 values is the 19th smallest). None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_server(port: int) -> subprocess.Popen:
    """`python -m playground` on `port` (its state store in a temporary folder), returned once it answers HTTP."""
    env = dict(os.environ, PLAYGROUND_STATE_DIR=tempfile.mkdtemp(prefix="bench-load-state-"))
    server = subprocess.Popen([sys.executable, "-m", "playground", "--port", str(port)], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"the server did not start (exit code {server.poll()})")


def loss_points(plot) -> int:
    """How many training-loss points a streamed gr.Plot value holds."""
    if not isinstance(plot, dict) or "plot" not in plot:
        return 0
    return len(json.loads(plot["plot"])["data"][0].get("x", []))


class RssSampler(threading.Thread):
    """The server's RSS every RSS_INTERVAL_S, until stopped or the process is gone."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stopped = pid, [], threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.samples.append(rss_mb(self.pid))
            except (OSError, RuntimeError):
                return
            self.stopped.wait(RSS_INTERVAL_S)


@dataclass
class Run:
    """One learner's press of Train. Times are seconds after its own press."""
    job: Job
    pressed: float
    seen: int = 0  # streamed outputs already looked at
    first_update: float | None = None
    first_point: float | None = None
    done: float | None = None
    error: str | None = None
    status: str | None = None

    def look(self, now: float) -> bool:
        """Read what the job has streamed so far; True once it has ended."""
        outputs = self.job.outputs()
        if outputs and self.first_update is None:
            self.first_update = now - self.pressed
        if self.first_point is None and len(outputs) > self.seen:  # parse only new charts, until one has a point
            self.seen = len(outputs)
            if loss_points(outputs[-1][2]):
                self.first_point = now - self.pressed
        if not self.job.done():
            return False
        self.done = now - self.pressed
        try:
            error = self.job.exception()
        except CancelledError as cancelled:  # a cancelled job raises it here
            error = cancelled
        if error is not None:
            self.error = f"{type(error).__name__}: {error}"
        elif outputs:
            self.status = str(outputs[-1][0])
        return True


def watch(runs: list[Run], deadline: float) -> None:
    """Poll every job, in this one thread, until all have ended or the deadline passes."""
    pending = list(runs)
    while pending and time.monotonic() < deadline:
        now = time.monotonic()
        pending = [run for run in pending if not run.look(now)]
        time.sleep(POLL_S)
    for run in pending:
        run.job.cancel()


def probe(client: Client, stop: threading.Event, deadline: float, latencies: dict[str, list[float]],
          errors: list[str]) -> None:
    """Time the light events one at a time, LIGHT_PAUSE_S apart, until `stop` is set."""
    while not stop.is_set():
        for kind, args in {**LIGHT, **RUNS}.items():
            started = time.monotonic()
            try:
                client.submit(*args, api_name=f"/{kind}").result(timeout=max(1.0, deadline - started))
                latencies[kind].append(time.monotonic() - started)
            except Exception as error:  # a failed or hung call is an error, not a latency
                errors.append(f"/{kind}: {type(error).__name__}: {error}")
            if stop.wait(LIGHT_PAUSE_S):
                return


def measure(n: int, timeout: float) -> dict:
    """Start a server, press Train in n sessions at once, and return what was measured."""
    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}/"
    clients: list[Client] = []
    sampler = RssSampler(server.pid)
    sampler.start()
    stop_probe = threading.Event()
    try:
        with ThreadPoolExecutor(8) as pool:
            clients = list(pool.map(lambda _: Client(url, verbose=False), range(n + 1)))
        prober, learners = clients[0], clients[1:]
        prober.predict(steps=PROBER_STEPS, api_name="/train")
        rss_idle = rss_mb(server.pid)
        load = os.getloadavg()[0]

        started = time.monotonic()
        deadline = started + timeout
        runs = [Run(client.submit(api_name="/train"), time.monotonic()) for client in learners]
        latencies: dict[str, list[float]] = {kind: [] for kind in {**LIGHT, **RUNS}}
        light_errors: list[str] = []
        prober_thread = threading.Thread(target=probe, args=(prober, stop_probe, deadline, latencies, light_errors),
                                         daemon=True)
        prober_thread.start()
        watch(runs, deadline)
        ended = time.monotonic()
        stop_probe.set()
        prober_thread.join(timeout=max(1.0, deadline - time.monotonic()))
        time.sleep(SETTLE_S)
        rss_after = rss_mb(server.pid)
        sampler.stopped.set()
        return summarize(n, runs, latencies, light_errors, ended - started, rss_idle,
                         max(sampler.samples + [rss_after]), rss_after, load)
    finally:
        stop_probe.set()
        sampler.stopped.set()
        for client in clients:
            client.close()
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def summarize(n: int, runs: list[Run], latencies: dict[str, list[float]], light_errors: list[str], elapsed: float,
              rss_idle: float, rss_peak: float, rss_after: float, load: float) -> dict:
    first_points = [math.inf if run.first_point is None else run.first_point for run in runs]
    durations = [run.done - run.first_update for run in runs if run.done is not None and run.first_update is not None]
    unfinished = sum(run.done is None for run in runs)
    errors = [f"training: {run.error}" for run in runs if run.error] + light_errors
    not_done = [run.status for run in runs if run.status is not None and not run.status.startswith("Done")]
    everything = [value for kind in LIGHT for value in latencies[kind]]
    light = {kind: dict(n=len(values), p50_s=percentile(values, 50), p95_s=percentile(values, 95))
             for kind, values in {**latencies, "all": everything}.items()}
    return dict(
        clients=n, load_average=round(load, 2),
        first_point_p50_s=percentile(first_points, 50), first_point_p95_s=percentile(first_points, 95),
        first_point_max_s=max(first_points, default=None), first_point_missing=sum(math.isinf(t) for t in first_points),
        all_done_s=None if unfinished else elapsed, unfinished=unfinished, run_duration_p50_s=percentile(durations, 50),
        light=light, light_p95_s=light["all"]["p95_s"],
        errors=len(errors), first_error=errors[0] if errors else None,
        not_done=len(not_done), first_not_done=not_done[0] if not_done else None,
        rss_idle_mb=round(rss_idle), rss_peak_mb=round(rss_peak), rss_after_mb=round(rss_after),
    )


def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "never" if math.isinf(value) else f"{value:.2f} s"


def report(r: dict) -> str:
    light = "; ".join(f"{'overall' if kind == 'all' else '/' + kind} p50 {seconds(v['p50_s'])}, "
                      f"p95 {seconds(v['p95_s'])} (n={v['n']})" for kind, v in r["light"].items())
    done = (f"{r['all_done_s']:.1f} s after the press" if r["all_done_s"] is not None
            else f"not reached: {r['unfinished']} still running when the round timed out")
    never = f" ({r['first_point_missing']} never)" if r["first_point_missing"] else ""
    first_not_done = f" (first: {r['first_not_done'][:200]})" if r["first_not_done"] else ""
    return "\n".join([
        f"N = {r['clients']} learners (load average {r['load_average']} before the press)",
        f"  first loss point: p50 {seconds(r['first_point_p50_s'])}, p95 {seconds(r['first_point_p95_s'])}, "
        f"max {seconds(r['first_point_max_s'])}{never}",
        f"  all done: {done}; each run's own duration p50 {seconds(r['run_duration_p50_s'])}",
        f"  light events: {light}",
        f"  errors: {r['errors']}" + (f" (first: {r['first_error'][:300]})" if r["first_error"] else ""),
        f"  statuses not \"Done\": {r['not_done']}{first_not_done}",
        f"  RSS: idle {r['rss_idle_mb']} MB, peak {r['rss_peak_mb']} MB, {SETTLE_S:.0f} s after the round's end "
        f"{r['rss_after_mb']} MB",
    ])


def for_json(value):
    """The result with seconds rounded to the millisecond and infinities as null (JSON has none)."""
    if isinstance(value, dict):
        return {key: for_json(item) for key, item in value.items()}
    if isinstance(value, float):
        return None if math.isinf(value) else round(value, 3)
    return value


def check_goals(r: dict) -> str:
    lines = [f"Goals at N = {r['clients']}:"]
    for what, key, holds, limit in GOALS:
        value = r[key]
        met = value is not None and holds(value, limit)
        measured = seconds(value) if isinstance(value, float) and key.endswith("_s") else value
        lines.append(f"  {'met' if met else 'NOT met':8s} {what} (measured: {measured})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 30, 60], help="learners per round")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds after the press before a round ends")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per round")
    args = parser.parse_args()

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    print(f"machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, {device}", flush=True)
    results = []
    for n in args.clients:
        result = measure(n, args.timeout)
        results.append(result)
        print(report(result), flush=True)
        if args.json:
            print(json.dumps(for_json(result)), flush=True)
    print(check_goals(max(results, key=lambda r: r["clients"])))


if __name__ == "__main__":
    main()
