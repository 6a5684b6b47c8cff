"""Workshop load benchmark (issue 11): N learners press Train at the same moment on one server.

    .venv/bin/python tests/bench/bench_load.py                        # 10, 30, then 60 learners
    .venv/bin/python tests/bench/bench_load.py --clients 2 3 --json   # quick; also one JSON line per N

For each N, measured from outside through the API:
- a fresh `python -m playground` on a free port, with its default memory budget for models (no count
  of models: half the memory free at start) and a state store of its own in a temporary folder;
- one "prober" session (gradio_client) that has trained a tiny model first, untimed: the teacher;
- N learners press Train at once with the form's defaults (what a learner who only presses Train
  gets; PAGE_THREADS presses in flight at a time), each as a browser tab does it: one join of the queue
  and one blocking read of its event stream (a thread each), over raw HTTP on the loopback address.
  Not gradio_client: its jobs poll twice every 50 ms each, and with 60 of them the load generator
  took 1.2 of the machine's 2 cores (290 CPU-s in 241 s), which real learners' browsers on their
  own laptops never take from the server;
- meanwhile the prober times light events one at a time, ~0.5 s apart (`LIGHT`: /generate of 50
  tokens, /preset, /attention; and `RUNS`: a whole /baby_gpt_train), and the server's RSS (with its
  step workers', `core.workers`) is sampled every 0.5 s.

With --room, the learners open the page, then join a room the teacher opened (/open_room) through its link before
they press Train (the page's private `join_from_link`, with `?room=` on its queue join as the page sends it), and
each page asks for the room's lesson as its script does (a plain GET of LESSON_PATH with the ticket the join gave,
every ROOM_ASK_S); with --view, the teacher's class view is open too from the press
to the round's end: its script POSTs for the chart, the counts and the table (VIEW_PATH) every TICK_S, and for
the gallery too every MAPS_TICK_S (issue 39).
Each timer's calls (and asks) are timed from the tick to the answer (a tick whose last call has not answered is skipped,
as a gr.Timer's is). `ROOM_TIMERS` declares them.

With --holding N, a second kind of round: N sessions train a short model one after another (as a
room fills over a morning) and keep it; the server's budget for models is set to --budget-mb, so
most of them are set aside to the store. Then every session generates once (bringing its model
back). Prints refusals, the server's RSS against the budget and the store's size.

Prints the machine, then a block per N: time from a learner's press to the first point on its
loss chart (p50, p95, max); the last training's end after the press; each run's own duration
(its first streamed update to its end, p50); light-event latency (p50/p95 per kind and overall);
errors (with the first message); final statuses that are not "Done: ..."; the server's idle RSS,
its peak and its RSS 5 s after the last training; the CPU seconds the server's process and its step
workers used from the press to the round's end (less sensitive than the times to what else runs on the
machine, which takes its cores), and this script's own (its threads share one Python lock: near one
CPU-second a second, the load generator itself is what slows the learners); in a room, each timer's
latency (p50, p95, max, count). Last, whether the issue's goals hold at the largest N (with --view,
issue 39's for the class view too). Percentiles are nearest-rank (see `percentile`). A learner that
never got a chart point counts as never (infinitely late; null in JSON). Figures depend on the
machine and on whatever else runs on it. The script lifts its limit on open files (the server
inherits it) to what N learners' sockets need; `--server-log PATH` keeps the servers' output.

On a GPU host (issue 38: 60, then 1,000 learners; the server stacks their steps there by default):

    python tests/bench/bench_load.py --clients 60 --timeout 45 --server-log /tmp/server60.log
    python tests/bench/bench_load.py --clients 1000 --timeout 150 --server-log /tmp/server1000.log
"""

from __future__ import annotations

import argparse
import json
import math
import operator
import os
import resource
import secrets
import subprocess
import tempfile
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import torch
from gradio_client import Client
from gradio_client.utils import apply_diff

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.support.app import free_port  # noqa: E402
from host import cpu_seconds, describe_host  # noqa: E402  (this script's folder is on sys.path)
from playground.settings import ENV_PREFIX, Settings  # noqa: E402
from playground.tabs.room import MAPS_TICK_S, TICK_S, VIEW_PATH  # noqa: E402
from playground.tabs.train.room import LESSON_PATH, ROOM_ASK_S  # noqa: E402

# Tiny Shakespeare from ../shared/data as in the tests, unless the caller says otherwise.
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))

GENERATE = ("abcdefgh|", 50, 0.8, 0, 1.0, None)  # prompt, max tokens, temperature, top-k, top-p, seed
# What a learner does while others train, timed by the prober (by API name, with its arguments): the
# light events (the goal's "overall" figure: 50 tokens, a preset change, the Attention tab's analysis),
# and a whole Baby GPT training with the tab's defaults (a run, shown beside them, not one of them).
LIGHT = {"generate": GENERATE, "preset": ("sort",), "attention": ("qwhzbkad|qwhzbkad",)}
RUNS = {"baby_gpt_train": ()}
HOLD_STEPS = 20  # a --holding session's model: trained enough to be kept, quickly
PROBER_STEPS = 30  # enough for /generate to have a model; short, so the prober is ready at once
LIGHT_PAUSE_S = 0.5
RSS_INTERVAL_S = 0.5
SETTLE_S = 5.0  # wait after the last training before the "after" RSS
# Issue 38's goals, checked at the largest N: by where the server trains (a GPU or not), the smallest N each
# holds for, then (what, result key, comparison, limit). A refusal ("the server is full") counts as an error.
GOALS = {
    "cpu": [
        (150, [("first loss point p95 <= 5 s", "first_point_p95_s", operator.le, 5.0),
               ("nobody refused, no errors", "errors", operator.eq, 0)]),
        (1, [("first loss point p95 <= 3 s", "first_point_p95_s", operator.le, 3.0),
             ("light events p95 < 0.5 s", "light_p95_s", operator.lt, 0.5),
             ("all trainings done <= 120 s", "all_done_s", operator.le, 120.0),
             ("nobody refused, no errors", "errors", operator.eq, 0),
             ("RSS peak < 3000 MB", "rss_peak_mb", operator.lt, 3000.0)]),
    ],
    "gpu": [
        (1000, [("first loss point p95 <= 3 s", "first_point_p95_s", operator.le, 3.0),
                ("all trainings done <= 60 s", "all_done_s", operator.le, 60.0),
                ("nobody refused, no errors", "errors", operator.eq, 0)]),
        (1, [("first loss point p95 <= 1 s", "first_point_p95_s", operator.le, 1.0),
             ("nobody refused, no errors", "errors", operator.eq, 0)]),
    ],
}
# A room (--room, --view): its name, and the timers its pages run, by name: (the route of the app's own they ask,
# whose page: each learner's, or the teacher's class view, what the page sends from the room's code and teacher key:
# a dictionary, POSTed as JSON (the table's first page; layer 0's head 0 in the gallery); None, a GET with the
# learner's ticket; every how many seconds). The class view's script asks one route, with the gallery every
# MAPS_TICK_S: two timers here, timed apart.
ROOM_NAME = "Bench room"
TICK_JOINERS = 16  # threads joining the queue for the pages' timers
ROOM_TIMERS = {
    "lesson": (LESSON_PATH, "learner", lambda code, key: None, ROOM_ASK_S),
    "view": (VIEW_PATH, "teacher", lambda code, key: {"code": code, "key": key, "highlight": None, "page": 1}, TICK_S),
    "view_with_maps": (VIEW_PATH, "teacher", lambda code, key: {
        "code": code, "key": key, "highlight": None, "page": 1, "maps": {"layer": 0, "head": 0, "page": 1}},
        MAPS_TICK_S),
}
# The goal for the class view (issue 39), checked when it was open: (what, result key, comparison, limit).
VIEW_GOALS = [(f"{timer} p95 <= 1 s", f"{timer}_p95_s", operator.le, 1.0)
              for timer, (_, whose, _, _) in ROOM_TIMERS.items() if whose == "teacher"]
# A room of at least `Settings.max_trainings` (200) learners is more than the server's defaults admit: its server
# is told to admit it all (as the README says a host of such a room does), plus the teacher and some headroom, in
# each of these settings whose default is smaller (trainings, events queued, sessions without a model yet: each
# learner's page makes one, learners in one room).
ROOM_CAPS = ("max_trainings", "max_queue_size", "max_light_sessions", "room_max_learners")
ROOM_HEADROOM = 50
# Threads acting for the learners' pages at once (opening them, joining the room, pressing Train): each action
# waits for the server's answer (a Train's join 0.15 s at p50 on a loaded 2-core host), so a thousand learners
# pressing one after another would take longer than the 10 s; a room presses at once.
PAGE_THREADS = 16
# Open files each learner takes, in this process and in the server: its event stream and a connection of the
# shared client's pool; beyond them, the server's own (its step workers' pipes, the store, imports).
FILES_PER_LEARNER, FILES_BESIDE = 4, 1024


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it
    (p50 of [1, 2, 3, 4] is 2; p95 of 20 values is the 19th smallest). None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def rss_mb(pid: int) -> float:
    """The resident memory of process `pid` and of every process it started (the step workers), in MB."""
    total = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            total = int(line.split()[1]) / 1024
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                total += rss_mb(int(child))
            except OSError:  # it ended meanwhile
                pass
    return total


def tree_cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by process `pid` itself, and by the processes it started that
    still run (the step workers)."""
    own, children = cpu_seconds(pid), 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                children += sum(tree_cpu_seconds(int(child)))
            except OSError:  # it ended meanwhile
                pass
    return own, children


def start_server(port: int, state_dir: str | None = None, log: Path | None = None, **settings) -> subprocess.Popen:
    """`python -m playground` on `port` (its state store in `state_dir`, by default a temporary folder, and
    `settings` as PLAYGROUND_* variables), returned once it answers HTTP. Its output is appended to `log`, if
    given (a run on a machine lent for minutes gets one try: its tracebacks say why), else discarded."""
    env = dict(os.environ, PLAYGROUND_STATE_DIR=state_dir or tempfile.mkdtemp(prefix="bench-load-state-"),
               **{f"PLAYGROUND_{name.upper()}": str(value) for name, value in settings.items()})
    command = [sys.executable, "-m", "playground", "--port", str(port)]
    if log is None:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        with log.open("a") as out:  # the server writes to its own copy of the file
            out.write(f"--- {' '.join(command)} {settings}\n")
            out.flush()
            server = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
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


class Browser:
    """Raw HTTP to the app as a browser speaks it: join the queue by event index, read a session's event
    stream. `index` maps API names (private ones too) to event indexes."""

    def __init__(self, url: str) -> None:
        self.url = url
        # One client for every tab, as a browser keeps its connections: a new httpx client costs ~35 ms of
        # CPU (its TLS context), and one per request took two of them per press from the server's two cores.
        self.http = httpx.Client(limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
                                 timeout=60)
        config = self.http.get(f"{url}config", timeout=30).json()
        self.index = {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name")}

    def join(self, api_name: str, data: list, session_hash: str, query: str = "") -> str:
        """Join the queue with an event (with the page's `query`, as Gradio's page sends its own); returns its id."""
        body = {"data": data, "fn_index": self.index[api_name], "session_hash": session_hash,
                "event_data": None, "trigger_id": None}
        answer = self.http.post(f"{self.url}gradio_api/queue/join?{query}", json=body, timeout=60)
        answer.raise_for_status()
        return answer.json()["event_id"]

    def messages(self, session_hash: str, timeout: float) -> Iterator[tuple[str, str, str]]:
        """(message kind, event id, raw JSON line) of the session's stream, until the server closes it (when no
        event of the session is pending). Kind and id are read without parsing the line: parsing every update
        of sixty streams is the client's cost."""
        query = urllib.parse.urlencode({"session_hash": session_hash})
        with self.http.stream("GET", f"{self.url}gradio_api/queue/data?{query}", timeout=timeout) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    head = line[:120]
                    kind = head.partition('"msg":')[2].partition(",")[0].strip(' "}')
                    event_id = head.partition('"event_id":')[2].partition(",")[0].strip(' "}')
                    if kind == "close_stream":
                        return
                    yield kind, event_id, line[5:]


Handler = Callable[[str, str], None]  # an event's messages as they come: (kind, raw JSON line)


class Tab(threading.Thread):
    """One browser tab's session: its events join the queue, and every event of the session comes down one
    event stream, as Gradio's page has it: the server closes the stream when no event is pending, and the tab
    opens it again at its next event. The thread reads the stream and hands each message to its event's handler
    (a "failed" message, its line the error, if the stream drops)."""

    def __init__(self, browser: Browser, timeout: float) -> None:
        super().__init__(daemon=True)
        self.browser, self.timeout = browser, timeout
        self.session_hash = secrets.token_hex(8)
        self.ticket: str | None = None  # its place in a room, which its page asks with (given by its join)
        self.handlers: dict[str, Handler] = {}  # of the events joined and not completed, by id
        self.early: dict[str, list[tuple[str, str]]] = {}  # messages that came before their join's answer
        self.changed = threading.Condition()
        self.closed = False
        self.start()

    def submit(self, api_name: str, data: list, handler: Handler, query: str = "") -> None:
        event_id = self.browser.join(api_name, data, self.session_hash, query)
        with self.changed:  # held while the early messages are handed over, so that they come first
            early = self.early.pop(event_id, [])
            for kind, line in early:
                handler(kind, line)
            if not any(kind == "process_completed" for kind, _ in early):
                self.handlers[event_id] = handler
                self.changed.notify()

    def call(self, api_name: str, data: list, timeout: float = 120, query: str = "") -> dict:
        """One event's last message: {"success", "output"}; `query`: the page's own (`?room=...`)."""
        answer: dict = {}
        completed = threading.Event()

        def keep(kind: str, line: str) -> None:
            if kind == "process_completed":
                answer.update(json.loads(line))
            elif kind == "failed":
                answer.update(success=False, output={"error": line})
            else:
                return
            completed.set()

        self.submit(api_name, data, keep, query)
        if not completed.wait(timeout):
            raise RuntimeError(f"/{api_name} gave no answer within {timeout:.0f} s")
        return answer

    def close(self) -> None:
        """End the thread once no event is pending."""
        with self.changed:
            self.closed = True
            self.changed.notify()

    def run(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.handlers or self.closed)
                if not self.handlers:
                    return
            try:
                for kind, event_id, line in self.browser.messages(self.session_hash, self.timeout):
                    self.hand(kind, event_id, line)
            except Exception as error:  # a dropped stream fails the events it carried, not the benchmark
                with self.changed:
                    failed, self.handlers = list(self.handlers.values()), {}
                for handler in failed:
                    handler("failed", f"{type(error).__name__}: {error}")

    def hand(self, kind: str, event_id: str, line: str) -> None:
        with self.changed:
            handler = self.handlers.get(event_id)
            if handler is None:
                self.early.setdefault(event_id, []).append((kind, line))
                return
            if kind == "process_completed":
                del self.handlers[event_id]
        handler(kind, line)


class Learner:
    """One learner's tab: `open_page` as the page's load does (Gradio makes the session's state, the app
    gives the tab its token for the state store, so its runs are kept there as a browser's are), then
    `press` presses Train with the form's `defaults`; `finished` is set at the training's end. Times are
    seconds after its own press."""

    def __init__(self, browser: Browser, defaults: list, timeout: float) -> None:
        self.tab, self.defaults = Tab(browser, timeout), defaults
        self.pressed = 0.0
        self.outputs: list | None = None  # the streamed outputs, diffs applied, until the first chart point
        self.first_update: float | None = None
        self.first_point: float | None = None
        self.done: float | None = None
        self.error: str | None = None
        self.status: str | None = None
        self.finished = threading.Event()

    def open_page(self) -> None:
        answer = self.tab.call("come_back", [None, None])
        if not answer.get("success"):
            raise RuntimeError(f"the page did not open: {answer}")

    def join_room(self, code: str) -> None:
        """Join the room as its link does (an anonymous name), and keep the ticket its page then asks with."""
        answer = self.tab.call("join_from_link", [None], query=urllib.parse.urlencode({"room": code}))
        values = [item.get("value") if isinstance(item, dict) else item
                  for item in (answer.get("output") or {}).get("data", [])]
        follows = [json.loads(value) for value in values if isinstance(value, str) and '"ticket"' in value]
        if not answer.get("success") or not follows:
            raise RuntimeError(f"the learner could not join the room: {answer}")
        self.tab.ticket = follows[0]["ticket"]

    def press(self) -> None:
        self.pressed = time.monotonic()
        try:
            self.tab.submit("train", self.defaults, self.follow)
        except Exception as error:  # a refused join is an error of this run, not of the benchmark
            self.error = f"{type(error).__name__}: {error}"
            self.finished.set()

    def follow(self, kind: str, line: str) -> None:
        now = time.monotonic() - self.pressed
        if kind == "process_generating":
            self.first_update = self.first_update if self.first_update is not None else now
            if self.first_point is None:
                data = json.loads(line)["output"]["data"]
                self.outputs = data if self.outputs is None else [apply_diff(o, d) for o, d in zip(self.outputs, data)]
                if loss_points(self.outputs[2]):
                    self.first_point, self.outputs = now, None
        elif kind == "process_completed":
            self.done, message = now, json.loads(line)
            if message.get("success"):
                self.status = str(message["output"]["data"][0])
            else:
                self.error = str((message.get("output") or {}).get("error"))
            self.finished.set()
        elif kind == "failed":
            self.error = line
            self.finished.set()


class Ticks(threading.Thread):
    """A page script's timer in each of `tabs`: every `period` s each tab asks the app's route `path` (a POST of
    `data`, a dictionary, as JSON; None: a GET with the tab's ticket, as a room's page asks for its lesson), unless
    its last ask has not been answered, until `stop`. Keeps each ask's latency, from the tick to its answer, and the
    errors, under `name`."""

    def __init__(self, tabs: list[Tab], name: str, path: str, data: dict | None, period: float,
                 stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.tabs, self.name, self.path, self.data, self.period, self.stop = tabs, name, path, data, period, stop
        self.pending: set[str] = set()  # the tabs' session hashes whose ask has not been answered
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        # Each page asks on its own, as browsers do: one thread asking for 150 pages, one after another, sent
        # 10 asks a second where 150 pages send 75 (and 5.6 on a loaded host).
        with ThreadPoolExecutor(TICK_JOINERS) as asks:
            due = time.monotonic()
            while not self.stop.wait(max(0.0, due - time.monotonic())):
                for tab in self.tabs:  # spread over half the period, as pages opened at different moments are
                    with self.lock:
                        if tab.session_hash in self.pending:
                            continue
                        self.pending.add(tab.session_hash)
                    asks.submit(self.ask, tab, time.monotonic())
                    if self.stop.wait(self.period / len(self.tabs) / 2):
                        return
                due = max(due + self.period, time.monotonic())

    def ask(self, tab: Tab, started: float) -> None:
        url = f"{tab.browser.url}{self.path.lstrip('/')}"
        try:
            if self.data is None:
                answer = tab.browser.http.get(url, params={"ticket": tab.ticket})
            else:
                answer = tab.browser.http.post(url, json=self.data)
            answer.raise_for_status()
            lesson = answer.json().get("lesson", 0)
            failed = None if isinstance(lesson, int) and lesson >= 0 else f"{self.name}: the room ended"
        except Exception as error:
            failed = f"{self.name}: {type(error).__name__}: {error}"
        with self.lock:
            self.pending.discard(tab.session_hash)
            if failed:
                self.errors.append(failed)
            else:
                self.latencies.append(time.monotonic() - started)


def probe(client: Client, stop: threading.Event, deadline: float, latencies: dict[str, list[float]],
          errors: list[str]) -> None:
    """Time the light events one at a time, LIGHT_PAUSE_S apart, until `stop` is set."""
    while not stop.is_set():
        for kind, args in {**LIGHT, **RUNS}.items():
            started = time.monotonic()
            try:
                client.submit(*args, api_name=f"/{kind}").result(timeout=max(1.0, deadline - started))
                latencies[kind].append(time.monotonic() - started)
            except Exception as error:  # a failed or hung call is an error, not a latency ...
                if time.monotonic() >= deadline:  # ... unless the round's end cut it short
                    return
                errors.append(f"/{kind}: {type(error).__name__}: {error}")
            if stop.wait(LIGHT_PAUSE_S):
                return


def endpoint_data(client: Client, api_name: str, **values) -> list:
    """An endpoint's inputs in order: its defaults from the app's own API description, some replaced."""
    parameters = client.view_api(return_format="dict", print_info=False)["named_endpoints"][api_name]["parameters"]
    unknown = set(values) - {parameter["parameter_name"] for parameter in parameters}
    assert not unknown, f"{api_name} has no parameters {unknown}"
    return [values.get(parameter["parameter_name"], parameter.get("parameter_default")) for parameter in parameters]


def room_settings(n: int) -> dict:
    """What the server of a room of `n` learners is told beyond its defaults (PLAYGROUND_* settings)."""
    if n < Settings.max_trainings:
        return {}
    return {cap: n + ROOM_HEADROOM for cap in ROOM_CAPS if n + ROOM_HEADROOM > getattr(Settings, cap)}


def raise_open_files(n: int) -> int:
    """Lift this process's limit on open files to what `n` learners need (the server it starts inherits it): at
    the usual 1,024, a room of a thousand runs out of sockets. Up to the hard limit, or past it where allowed
    (root). Returns the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = FILES_PER_LEARNER * n + FILES_BESIDE
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    try:
        unlimited = hard == resource.RLIM_INFINITY
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard if unlimited or hard >= needed else needed))
    except (ValueError, OSError):  # not allowed past the hard limit: up to it
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def measure(n: int, timeout: float, room: bool = False, view: bool = False, log: Path | None = None) -> dict:
    """Start a server (its output to `log`), press Train in n sessions at once, and return what was measured. With
    `room`, the learners join a room the teacher opened before they press Train, and their pages poll for its
    lessons; with `view`, the teacher's class view is open too, from the press to the round's end."""
    port, launched = free_port(), time.monotonic()
    server = start_server(port, log=log, **room_settings(n))
    url = f"http://127.0.0.1:{port}/"
    sampler = RssSampler(server.pid)
    sampler.start()
    stop_probe, stop_timers = threading.Event(), threading.Event()
    prober = Client(url, verbose=False)
    runs: list[Learner] = []
    teacher: Tab | None = None
    try:
        browser, defaults = Browser(url), endpoint_data(prober, "/train")
        prober.predict(steps=PROBER_STEPS, api_name="/train")
        runs = [Learner(browser, defaults, timeout) for _ in range(n)]
        with ThreadPoolExecutor(PAGE_THREADS) as pool:  # the room opens the page before anyone presses Train
            list(pool.map(Learner.open_page, runs))
        timers: list[Ticks] = []
        if room:
            teacher = Tab(browser, timeout)
            code, key, _link = teacher.call("open_room", [ROOM_NAME, "", url])["output"]["data"]
            with ThreadPoolExecutor(PAGE_THREADS) as pool:
                list(pool.map(lambda run: run.join_room(code), runs))
            tabs = {"learner": [run.tab for run in runs], "teacher": [teacher] if view else []}
            timers = [Ticks(tabs[whose], name, path, data(code, key), period, stop_timers)
                      for name, (path, whose, data, period) in ROOM_TIMERS.items() if tabs[whose]]
        rss_idle = rss_mb(server.pid)
        load = os.getloadavg()[0]
        print(f"N = {n}: server up, {n} pages open{' and in the room' if room else ''} "
              f"{time.monotonic() - launched:.1f} s after its launch; pressing Train", flush=True)

        cpu_before = (*tree_cpu_seconds(server.pid), time.process_time())  # the server, its workers, this script
        started = time.monotonic()
        deadline = started + timeout
        for timer in timers:  # the pages' timers, from the press to the round's end
            timer.start()
        with ThreadPoolExecutor(PAGE_THREADS) as pool:  # the learners press at once, as a room does when told to
            list(pool.map(Learner.press, runs))
        pressed = max((run.pressed for run in runs), default=started) - started
        latencies: dict[str, list[float]] = {kind: [] for kind in {**LIGHT, **RUNS}}
        light_errors: list[str] = []
        prober_thread = threading.Thread(target=probe, args=(prober, stop_probe, deadline, latencies, light_errors),
                                         daemon=True)
        prober_thread.start()
        for run in runs:
            run.finished.wait(max(0.0, deadline - time.monotonic()))
        ended = time.monotonic()
        cpu_after = (*tree_cpu_seconds(server.pid), time.process_time())
        cpu = [after - before for after, before in zip(cpu_after, cpu_before)]
        stop_probe.set()
        stop_timers.set()
        prober_thread.join(timeout=max(1.0, deadline - time.monotonic()))
        time.sleep(SETTLE_S)
        rss_after = rss_mb(server.pid)
        sampler.stopped.set()
        return summarize(n, runs, latencies, light_errors, ended - started, rss_idle,
                         max(sampler.samples + [rss_after]), rss_after, load, cpu, timers, pressed)
    finally:
        stop_probe.set()
        stop_timers.set()
        sampler.stopped.set()
        for tab in [run.tab for run in runs] + ([teacher] if teacher else []):
            tab.close()
        prober.close()
        stop_server(server)


def stop_server(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()


def hold(n: int, budget_mb: int | None, log: Path | None = None) -> dict:
    """N sessions open the page and train a short model one after another, keeping it (the server's budget
    for models `budget_mb`, else its default); then each generates once, bringing back a model that was set
    aside. Returns refusals, errors, RSS and the store's size."""
    port, state_dir = free_port(), tempfile.mkdtemp(prefix="bench-load-state-")
    budget = {} if budget_mb is None else {"model_memory_bytes": budget_mb << 20}
    server = start_server(port, state_dir, log, **budget)
    url = f"http://127.0.0.1:{port}/"
    sampler = RssSampler(server.pid)
    sampler.start()
    client = Client(url, verbose=False)
    try:
        browser = Browser(url)
        train = endpoint_data(client, "/train", steps=HOLD_STEPS)
        generate = endpoint_data(client, "/generate", prompt=GENERATE[0], max_new_tokens=20)
        rss_idle = rss_mb(server.pid)
        learners = [Learner(browser, train, timeout=120) for _ in range(n)]
        answers: dict[str, list[str]] = {"train": [], "generate": []}
        started = time.monotonic()
        for kind, data in (("train", train), ("generate", generate)):
            for learner in learners:
                if kind == "train":
                    learner.open_page()
                answer = learner.tab.call(kind, data)
                answers[kind].append("" if answer.get("success") else str((answer.get("output") or {}).get("error")))
        elapsed = time.monotonic() - started
        sampler.stopped.set()
        failed = [message for kind in answers for message in answers[kind] if message]
        return dict(
            sessions=n, budget_mb=budget_mb, seconds=round(elapsed, 1),
            refused=sum("server is full" in message for message in failed),
            errors=len(failed), first_error=failed[0] if failed else None,
            rss_idle_mb=round(rss_idle), rss_peak_mb=round(max(sampler.samples + [rss_mb(server.pid)])),
            store_mb=round(sum(f.stat().st_size for f in Path(state_dir).rglob("*") if f.is_file()) / 2**20, 1),
        )
    finally:
        sampler.stopped.set()
        client.close()
        stop_server(server)


def report_hold(r: dict) -> str:
    budget = "the server's default" if r["budget_mb"] is None else f"{r['budget_mb']} MB"
    return (f"{r['sessions']} sessions holding a model ({HOLD_STEPS} steps each; budget for models {budget}), "
            f"trained one after another, then each generating once ({r['seconds']} s in all):\n"
            f"  refused: {r['refused']}; errors: {r['errors']}" + (f" (first: {r['first_error'][:300]})" if r["first_error"] else "")
            + f"\n  RSS: idle {r['rss_idle_mb']} MB, peak {r['rss_peak_mb']} MB; the store holds {r['store_mb']} MB")


def summarize(n: int, runs: list[Learner], latencies: dict[str, list[float]], light_errors: list[str], elapsed: float,
              rss_idle: float, rss_peak: float, rss_after: float, load: float, cpu: list[float],
              timers: list[Ticks], pressed: float) -> dict:
    first_points = [math.inf if run.first_point is None else run.first_point for run in runs]
    durations = [run.done - run.first_update for run in runs if run.done is not None and run.first_update is not None]
    unfinished = sum(run.done is None for run in runs)
    errors = [f"training: {run.error}" for run in runs if run.error] + light_errors + [
        error for timer in timers for error in timer.errors]
    not_done = [run.status for run in runs if run.status is not None and not run.status.startswith("Done")]
    everything = [value for kind in LIGHT for value in latencies[kind]]
    light = {kind: dict(n=len(values), p50_s=percentile(values, 50), p95_s=percentile(values, 95))
             for kind, values in {**latencies, "all": everything}.items()}
    ticks = {timer.name: dict(n=len(timer.latencies), p50_s=percentile(timer.latencies, 50),
                                  p95_s=percentile(timer.latencies, 95), max_s=max(timer.latencies, default=None))
             for timer in timers}
    return dict(
        clients=n, load_average=round(load, 2), pressed_s=pressed,
        first_point_p50_s=percentile(first_points, 50), first_point_p95_s=percentile(first_points, 95),
        first_point_max_s=max(first_points, default=None), first_point_missing=sum(math.isinf(t) for t in first_points),
        all_done_s=None if unfinished else elapsed, unfinished=unfinished, run_duration_p50_s=percentile(durations, 50),
        light=light, light_p95_s=light["all"]["p95_s"],
        errors=len(errors), first_error=errors[0] if errors else None,
        not_done=len(not_done), first_not_done=not_done[0] if not_done else None,
        rss_idle_mb=round(rss_idle), rss_peak_mb=round(rss_peak), rss_after_mb=round(rss_after),
        server_cpu_s=round(cpu[0], 1), workers_cpu_s=round(cpu[1], 1), bench_cpu_s=round(cpu[2], 1),
        ticks=ticks, **{f"{event}_p95_s": tick["p95_s"] for event, tick in ticks.items()},
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
        f"N = {r['clients']} learners (load average {r['load_average']} before the press; "
        f"all pressed Train within {seconds(r['pressed_s'])})",
        f"  first loss point: p50 {seconds(r['first_point_p50_s'])}, p95 {seconds(r['first_point_p95_s'])}, "
        f"max {seconds(r['first_point_max_s'])}{never}",
        f"  all done: {done}; each run's own duration p50 {seconds(r['run_duration_p50_s'])}",
        f"  light events: {light}",
        *(["  room's timers (from the press to the round's end): " + "; ".join(
            f"/{event} p50 {seconds(v['p50_s'])}, p95 {seconds(v['p95_s'])}, max {seconds(v['max_s'])} (n={v['n']})"
            for event, v in r["ticks"].items())] if r["ticks"] else []),
        f"  errors: {r['errors']}" + (f" (first: {r['first_error'][:300]})" if r["first_error"] else ""),
        f"  statuses not \"Done\": {r['not_done']}{first_not_done}",
        f"  RSS: idle {r['rss_idle_mb']} MB, peak {r['rss_peak_mb']} MB, {SETTLE_S:.0f} s after the round's end "
        f"{r['rss_after_mb']} MB",
        f"  CPU from the press to the round's end: {r['server_cpu_s']} s in the server's process, "
        f"{r['workers_cpu_s']} s in its step workers, {r['bench_cpu_s']} s in this script (its learners, prober "
        f"and samplers)",
    ])


def for_json(value):
    """The result with seconds rounded to the millisecond and infinities as null (JSON has none)."""
    if isinstance(value, dict):
        return {key: for_json(item) for key, item in value.items()}
    if isinstance(value, float):
        return None if math.isinf(value) else round(value, 3)
    return value


def check_goals(r: dict, where: str) -> str:
    lines = [f"Goals at N = {r['clients']}, training on the {where.upper()}:"]
    goals = next(goals for smallest, goals in GOALS[where] if r["clients"] >= smallest)
    goals = goals + [goal for goal in VIEW_GOALS if goal[1] in r]
    for what, key, holds, limit in goals:
        value = r[key]
        met = value is not None and holds(value, limit)
        measured = seconds(value) if isinstance(value, float) and key.endswith("_s") else value
        lines.append(f"  {'met' if met else 'NOT met':8s} {what} (measured: {measured})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="*", default=[10, 30, 60],
                        help="learners per round (none: only --holding rounds)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds after the press before a round ends")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per round")
    parser.add_argument("--room", action="store_true",
                        help="the learners join a room the teacher opened before they press Train (issue 39)")
    parser.add_argument("--view", action="store_true",
                        help="and the teacher's class view is open for the whole round (implies --room)")
    parser.add_argument("--holding", type=int, nargs="*", default=[], metavar="N",
                        help="then a round of N sessions holding models (see above)")
    parser.add_argument("--budget-mb", type=int, help="the server's memory for models in the --holding rounds")
    parser.add_argument("--server-log", type=Path, metavar="PATH",
                        help="append each server's output (its log lines, tracebacks) to PATH; by default discarded")
    args = parser.parse_args()

    print(describe_host(), flush=True)
    where = "gpu" if torch.cuda.is_available() else "cpu"  # where the server's trainings go ("auto")
    if where == "gpu":
        print(f"GPU: {torch.cuda.get_device_name()}, torch CUDA {torch.version.cuda}", flush=True)
    files = raise_open_files(max(args.clients + args.holding, default=0))
    print("server: " + ", ".join(f"{ENV_PREFIX}{name}=" + os.environ.get(ENV_PREFIX + name, "auto (the default)")
                                 for name in ("STEP_WORKERS", "STACK_STEPS")) + f"; open files up to {files:,} a process",
          flush=True)
    results = []
    for n in args.clients:
        if room_settings(n):
            print(f"N = {n}: the server is started with " + ", ".join(
                f"PLAYGROUND_{name.upper()}={value}" for name, value in room_settings(n).items()), flush=True)
        result = measure(n, args.timeout, room=args.room or args.view, view=args.view, log=args.server_log)
        results.append(result)
        print(report(result), flush=True)
        if args.json:
            print(json.dumps(for_json(result)), flush=True)
    if results:
        print(check_goals(max(results, key=lambda r: r["clients"]), where))
    for n in args.holding:
        result = hold(n, args.budget_mb, args.server_log)
        print(report_hold(result), flush=True)
        if args.json:
            print(json.dumps(for_json(result)), flush=True)


if __name__ == "__main__":
    main()
