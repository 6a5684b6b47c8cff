"""How late a learner's new point reaches the teacher's class chart, with the teacher's page in headless Chromium and
the learners training over the API (as learners on their own laptops: their pages cost this host nothing), issue 39.

    .venv/bin/python tests/bench/bench_class_view.py                     # 10 learners, 200 steps each
    .venv/bin/python tests/bench/bench_class_view.py --learners 30 --steps 100

One server in this process (its step workers as "auto" gives them), a teacher page that opens a room, N gradio_client
learners that join it (/join_room) and press Train at once. Meanwhile the page keeps when its chart drew which step
of each learner (`support.class_chart.RECORD`) and a thread reads each learner's steps from the server's sessions
every 50 ms (`ServerSteps`): printed, the delay from the server recording a step to the teacher's chart showing it
(p50, p90, max), the teacher page's long tasks (its main thread busy for 50 ms or more at a time), and the host's
speed. `tests/test_room_browser.py` measures the same with ten learner pages on the same host as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))

from gradio_client import Client  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from host import describe_host  # noqa: E402  (this script's folder is on sys.path)
from playground.settings import Settings  # noqa: E402
from tests.support.app import serve  # noqa: E402
from tests.support.browser import CHROMIUM_ARGS, find_chromium, new_page  # noqa: E402
from tests.support.class_chart import RECORD, ServerSteps, delays, summary  # noqa: E402

LONG_TASKS = """() => {
    window.longTasks = [];
    new PerformanceObserver(list => { for (const e of list.getEntries()) window.longTasks.push(e.duration); })
        .observe({entryTypes: ["longtask"]});
}"""


def open_room(page) -> str:
    """Open a room on the page's Room tab; its code."""
    page.get_by_role("tab", name="Room").click()
    page.locator("#room-name-input textarea, #room-name-input input").first.fill("Bench room")
    page.locator("#room-open").click()
    page.locator("#class-view").wait_for()
    code = page.locator("#room-code textarea, #room-code input").first
    page.wait_for_function("(box) => box.value.length > 0", arg=code.element_handle())
    return code.input_value()


def measure(learners: int, steps: int) -> None:
    settings = Settings.from_env({})
    workers = str(settings.worker_processes) if settings.worker_processes else "off"
    with serve(dataclasses.replace(settings, step_workers=workers)) as (demo, url), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(p.chromium.executable_path), args=CHROMIUM_ARGS)
        teacher = new_page(browser, url)
        code = open_room(teacher)
        clients = [Client(url, verbose=False) for _ in range(learners)]
        for client in clients:
            client.predict(code, "", api_name="/join_room")
        teacher.locator("#class-counts").filter(has_text=f"{learners} joined").wait_for()
        teacher.evaluate(RECORD, ["#class-chart .js-plotly-plot", 100])
        teacher.evaluate(LONG_TASKS)
        recorded = ServerSteps(demo, {member.key: member.name for member in demo.rooms._rooms[code].present})
        jobs = [client.submit(steps=steps, api_name="/train") for client in clients]
        for job in jobs:
            job.result(timeout=1800)
        teacher.wait_for_timeout(3000)  # the chart's next redraws
        recorded.stopped.set()
        seen = teacher.evaluate("() => window.seenSteps")
        waits = [wait for name, updates in recorded.updates.items() for wait in delays(updates, seen, name)]
        busy = teacher.evaluate("() => window.longTasks")
        print(f"{learners} learners x {steps} steps: a step reached the teacher's chart {summary(waits)} after the "
              f"server recorded it; the teacher page's long tasks: {len(busy)}, {sum(busy) / 1000:.1f} s in all, "
              f"longest {max(busy, default=0):.0f} ms")
        print(describe_host())
        for client in clients:
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    measure(args.learners, args.steps)


if __name__ == "__main__":
    main()
