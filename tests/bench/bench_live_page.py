"""What a training costs the learner's own page: its main thread while the Train tab streams a run, and each live
chart's draws (issue 39: ten such pages on one host held its cores).

    .venv/bin/python tests/bench/bench_live_page.py              # 10 s of the default preset's run
    .venv/bin/python tests/bench/bench_live_page.py --seconds 20

One server in this process (its steps on the server's own thread, as a laptop's server runs), one page in headless
Chromium that presses Train with Steps 3000 (the default preset, still training when the window ends). Over the
window the page counts each chart's `Plotly.react` calls, their time, and the chart elements it drew into (a chart
mounted anew for each update shows as many elements), and Chrome's sampling profiler records the main thread.
Printed: per chart, the draws and the elements; from the profile, the main thread's busy time, Plotly's share and
Gradio's per-message `update_loading_stati_state`; and the host's speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))

from playwright.sync_api import sync_playwright  # noqa: E402

from host import describe_host  # noqa: E402  (this script's folder is on sys.path)
from playground.settings import Settings  # noqa: E402
from tests.support.app import serve  # noqa: E402
from tests.support.browser import CHROMIUM_ARGS, find_chromium, new_page, set_number  # noqa: E402

# Counts each chart's draws: the chart is named by the nearest element id above its Plotly element (a LivePlot's own
# generated "html-..." id skipped), and each element drawn into is marked once.
COUNT_DRAWS = """() => {
    const Plotly = window.Plotly; window.draws = {};
    const react = Plotly.react;
    Plotly.react = function (chart, ...rest) {
        let named = chart; while (named && (!named.id || named.id.startsWith("html-"))) named = named.parentElement;
        const mine = window.draws[named ? named.id : "?"] ||= {draws: 0, ms: 0, elements: 0};
        if (!chart.dataset.counted) { chart.dataset.counted = "yes"; mine.elements++; }
        const started = performance.now(), answer = react.call(this, chart, ...rest);
        mine.draws++; mine.ms += performance.now() - started;
        return answer;
    };
}"""
GRADIO_PER_MESSAGE = "update_loading_stati_state"


def profile_totals(profile: dict) -> tuple[float, float, float, float]:
    """(sampled seconds, idle seconds, seconds inside Plotly's bundle, seconds inside GRADIO_PER_MESSAGE) of a
    Chrome CPU profile: each sample counted once under every function on its stack."""
    nodes = {node["id"]: node for node in profile["nodes"]}
    parent = {child: node["id"] for node in profile["nodes"] for child in node.get("children", ())}
    total = idle = plotly = gradio = 0.0
    for sample, delta in zip(profile["samples"], profile["timeDeltas"]):
        seconds, frames = delta / 1e6, []
        node = sample
        while node is not None:
            frames.append(nodes[node]["callFrame"])
            node = parent.get(node)
        total += seconds
        idle += seconds if frames[0]["functionName"] == "(idle)" else 0.0
        plotly += seconds if any("PlotlyPlot" in frame["url"] for frame in frames) else 0.0
        gradio += seconds if any(frame["functionName"] == GRADIO_PER_MESSAGE for frame in frames) else 0.0
    return total, idle, plotly, gradio


def measure(seconds: float) -> None:
    with serve(dataclasses.replace(Settings.from_env({}), step_workers="off")) as (_, url), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(p.chromium.executable_path), args=CHROMIUM_ARGS)
        page = new_page(browser, url)
        page.wait_for_function("() => window.Plotly")
        set_number(page, "Steps", 3000)
        page.locator("#train-button").click()
        page.locator("#train-status").filter(has_text="Training").wait_for()
        time.sleep(2)  # past the first updates
        page.evaluate(COUNT_DRAWS)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Profiler.enable")
        cdp.send("Profiler.setSamplingInterval", {"interval": 500})
        cdp.send("Profiler.start")
        time.sleep(seconds)
        profile = cdp.send("Profiler.stop")["profile"]
        draws = page.evaluate("() => window.draws")
        total, idle, plotly, gradio = profile_totals(profile)
        print(f"{seconds:g} s of the default preset training, one page:")
        for chart, seen in sorted(draws.items(), key=lambda item: -item[1]["ms"]):
            print(f"  {chart}: {seen['draws']} draws into {seen['elements']} element(s), "
                  f"{seen['ms'] / max(seen['draws'], 1):.0f} ms each (the call's own time)")
        print(f"  main thread (profile of {total:.1f} s): busy {total - idle:.2f} s, idle {idle:.2f} s; "
              f"Plotly {plotly:.2f} s, Gradio's {GRADIO_PER_MESSAGE} {gradio:.2f} s")
        print(describe_host())
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the page is watched while it trains")
    measure(parser.parse_args().seconds)


if __name__ == "__main__":
    main()
