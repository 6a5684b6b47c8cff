"""Baby GPT: from a click on Train to the trained graph, with the defaults (Karpathy's example).

    .venv/bin/python tests/bench/bench_babygpt.py            # core and the app's API
    .venv/bin/python tests/bench/bench_babygpt.py --browser  # also a real click in headless Chromium

Prints, in seconds:
- core: the whole 50-step training with all 51 snapshots (one torch thread, like the server);
  `cold` is the first run in a fresh process (torch's one-off start-up), `warm` the median after.
- per-frame costs: the figures and analysis one streamed frame or the final view builds.
- app: a gradio_client call of /baby_gpt_train on a freshly launched app until the trained
  graph arrives, first call and later calls. The tab paces short runs to play for
  MIN_ANIMATION_S so the chain visibly forms; that pacing is part of the click-to-graph time.
- browser (--browser): a click on Train until the plot shows "Step 50 / 50".
The target is under 3 s from click to trained graph on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.babygpt import EXAMPLE_SEQUENCE, BabyConfig, BabyRun, analyse_chain, transition_graph  # noqa: E402
from playground.figures.baby import chain_figure, comparison_figure  # noqa: E402
from playground.tabs import baby as tab  # noqa: E402

RUNS = 5
# sequence, V, L, layers, heads, n_embd, steps, learning rate, seed, temperature
DEFAULT_FORM = [EXAMPLE_SEQUENCE, 2, 3, 4, 4, 16, 50, 1e-3, 1337, 1.0]
TARGET_S = 3.0


def train_default() -> BabyRun:
    run = BabyRun.start(EXAMPLE_SEQUENCE, BabyConfig())
    for _ in run.train():
        pass
    return run


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_core() -> None:
    cold = timed(train_default)
    warm = statistics.median(timed(train_default) for _ in range(RUNS))
    print(f"core   default training, 50 steps + 51 snapshots: cold {cold:.3f} s, warm {warm:.3f} s (median of {RUNS})")
    for sequence, config in [
        (EXAMPLE_SEQUENCE, BabyConfig()),
        ("0123" * 40, BabyConfig(vocab_size=3, context_length=4, steps=1)),  # 81 states, the largest drawn
    ]:
        sequence = "".join(ch for ch in sequence if int(ch) < config.vocab_size)
        run = BabyRun.start(sequence, config)
        for _ in run.train():
            pass
        probs = run.snapshots[-1].probs()
        costs = {
            "frame (chain)": lambda: chain_figure(transition_graph(run.space, probs), unseen=[]).plot,
            "analysis": lambda: analyse_chain(run.space, probs, run.counts),
            "comparison": lambda: comparison_figure(
                analyse_chain(run.space, probs, run.counts), run.space.labels(), list(run.space.tokenizer.chars)
            ).to_json(),
        }
        size = len(chain_figure(transition_graph(run.space, probs), unseen=[]).plot)
        parts = ", ".join(f"{name} {1000 * statistics.median(timed(fn) for _ in range(RUNS)):.0f} ms"
                          for name, fn in costs.items())
        print(f"figure {run.space.n_states:>2} states: {parts}; chain JSON {size / 1000:.0f} kB")


def bench_app(browser: bool) -> None:
    from gradio_client import Client

    from tests.support.app import serve

    with serve() as (_demo, url):
        client = Client(url, verbose=False)
        times = [timed(lambda: client.predict(*DEFAULT_FORM, api_name="/baby_gpt_train")) for _ in range(RUNS)]
        print(f"app    /baby_gpt_train, request to trained graph: first {times[0]:.2f} s, "
              f"then median {statistics.median(times[1:]):.2f} s (paced to at least {tab.MIN_ANIMATION_S} s)")
        if browser:
            bench_browser(url)


def bench_browser(url: str) -> None:
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM_ARGS, find_chromium

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=find_chromium(p.chromium.executable_path), args=CHROMIUM_ARGS)
        page = chromium.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Baby GPT").click()
        page.locator("#baby-chain .gtitle").wait_for(timeout=30_000)
        times = []
        status = page.locator("#baby-status")
        for _ in range(3):
            start = time.perf_counter()
            page.locator("#baby-train").click()
            status.get_by_text("Training...").wait_for(timeout=60_000)  # the paced replay lasts 1.5 s
            status.get_by_text("Trained 50 steps").wait_for(timeout=60_000)
            page.wait_for_function("document.querySelector('#baby-chain .gtitle').textContent.startsWith('Step 50 / 50')")
            times.append(time.perf_counter() - start)
        chromium.close()
    print(f"browser click on Train to trained graph: {', '.join(f'{t:.2f}' for t in times)} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browser", action="store_true", help="also time a click in headless Chromium")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the server runs (Settings.torch_threads)
    bench_core()
    bench_app(args.browser)
    print(f"target: under {TARGET_S:.0f} s from click to trained graph")


if __name__ == "__main__":
    main()
