"""The class chart as the pages and the server see it, for the room's browser test and `bench/bench_class_view.py`:
a script each page runs that keeps when its chart drew which step of each learner (RECORD), each learner's steps as
the server records them (ServerSteps), and the delays between the two (`delays`, `summary`).

Never imports a test module or the app's layout (it reads a running app's registry).
"""

import statistics
import threading
import time

# Kept in each page: (time, the last step of each named trace) whenever one changes. Read in the page every 100 ms
# so that eleven pages cost Python nothing until the end, on one clock (the pages share this machine's).
RECORD = """([selector, every]) => {
    window.seenSteps = []; let last = "";
    setInterval(() => {
        const plot = document.querySelector(selector);
        if (!plot || !plot.data) return;
        const steps = {};
        for (const trace of plot.data) if (trace.x && trace.x.length) steps[trace.name] = Math.max(...trace.x);
        const now = JSON.stringify(steps);
        if (now !== last) { last = now; window.seenSteps.push([Date.now() / 1000, steps]); }
    }, every);
}"""


def delays(updates: list[tuple[float, int]], teacher_seen: list, name: str) -> list[float]:
    """For each (moment, step) of a learner's updates: seconds until the teacher's chart showed `name` at that
    step or later (inf: never)."""
    found = []
    for moment, step in updates:
        shown = (when for when, traced in teacher_seen if traced.get(name, -1) >= step)
        found.append(next(shown, float("inf")) - moment)  # below 0: the view had it before that moment
    return found


def drawn(learner_seen: list) -> list[tuple[float, int]]:
    """(moment, step) each time the learner's own chart drew a new training point."""
    return [(moment, steps["train"]) for moment, steps in learner_seen if "train" in steps]


class ServerSteps(threading.Thread):
    """Each learner's last trained step as the server recorded it (their session's history), read every 50 ms on
    the pages' clock (seconds since 1970): when a point exists, before any page draws it."""

    def __init__(self, demo, keys: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.demo, self.keys, self.stopped = demo, keys, threading.Event()
        self.updates: dict[str, list[tuple[float, int]]] = {name: [] for name in keys.values()}
        self.start()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            for key, name in self.keys.items():
                session = self.demo.registry.peek(key)
                trained = None if session is None else session.trained
                rows = [] if trained is None else trained.history[-3:]
                steps = [row["step"] for row in rows if row.get("train_loss") is not None]
                seen = self.updates[name]
                if steps and (not seen or steps[-1] > seen[-1][1]):
                    seen.append((time.time(), steps[-1]))


def summary(waits: list[float]) -> str:
    every = sorted(waits)
    return (f"p50 {statistics.median(every):.2f} s, p90 {every[len(every) * 9 // 10]:.2f} s, max {every[-1]:.2f} s "
            f"({len(every)} points)")
