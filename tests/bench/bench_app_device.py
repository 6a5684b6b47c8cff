"""The app on whatever the server computes on (issue 25: a GPU with no setting): presets trained through
the running app as one learner does it, then Generate and the Attention analysis on that model.

    .venv/bin/python tests/bench/bench_app_device.py                       # repeat, then shakespeare-char
    .venv/bin/python tests/bench/bench_app_device.py --presets repeat --steps 0

Starts `python -m playground` on a free port with no settings (the device is the app's own choice:
CUDA, then Apple's MPS, then the CPU). For each preset a new session opens the page, fills the form as
picking the preset does (`--steps` N > 0 shortens it) and presses Train over raw HTTP, as
bench_load.py's learners do. Prints, per preset: the time from the press to the first point of the
loss chart, the run's own duration (first update to end), tokens/s over it (steps x batch x block),
the final status; then the time of a /generate (200 tokens) and an /attention analysis on the model.
Last, the GPU memory each process holds (nvidia-smi), which shows whether the server used the GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench_load import Browser, Learner, start_server, stop_server  # noqa: E402
from host import describe_host  # noqa: E402
from playground.settings import Settings  # noqa: E402
from playground.tabs.train.form import FormRules  # noqa: E402
from playground.tabs.train.link import preset_values  # noqa: E402
from tests.support.app import free_port  # noqa: E402


def nvidia_smi(query: str, nothing: str) -> str:
    """`nvidia-smi --query-<query> --format=csv,noheader`'s answer, or `nothing` without one."""
    try:
        answer = subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        answer = ""
    return answer or nothing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["repeat", "shakespeare-char"])
    parser.add_argument("--steps", type=int, default=0, help="steps per run (0: each preset's own, as capped)")
    args = parser.parse_args()
    print(describe_host(), flush=True)
    print(f"GPU: {nvidia_smi('gpu=name,memory.total', 'no GPU')}", flush=True)

    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}/"
    try:
        browser = Browser(url)
        rules = FormRules(Settings.from_env())  # the server's own settings, so the caps match
        for preset in args.presets:
            form = preset_values(rules, preset)
            if args.steps:
                form["steps"] = args.steps
            learner = Learner(browser, list(form.values()), timeout=600)
            learner.open_page()
            learner.run()
            duration = None if learner.done is None or learner.first_update is None else learner.done - learner.first_update
            tokens = form["steps"] * form["batch_size"] * form["block_size"]
            speed = f"{tokens / duration:,.0f} tokens/s" if duration else "n/a"
            print(f"{preset}: {form['steps']} steps of {form['batch_size']} x {form['block_size']} tokens, "
                  f"{form['n_layer']} layers x {form['n_head']} heads x {form['n_embd']} channels", flush=True)
            first = "never" if learner.first_point is None else f"{learner.first_point:.2f} s"
            print(f"  first loss point {first} after the press; the run {duration or 0:.1f} s, {speed}", flush=True)
            print(f"  status: {(learner.status or learner.error or '')[:160]}", flush=True)
            text = "qwhzbkad|qwhzbkad" if form["corpus"] == "repeat" else "To be, or not to be"
            for api_name, data in (("generate", ["", 200, 0.8, 0, 1.0, 1]), ("attention", [text])):
                started = time.monotonic()
                answer = browser.call(api_name, data, learner.session_hash)
                said = "ok" if answer.get("success") else f"error: {str((answer.get('output') or {}).get('error'))[:120]}"
                print(f"  /{api_name}: {time.monotonic() - started:.2f} s, {said}", flush=True)
        print(f"GPU memory by process (the server is pid {server.pid}): {nvidia_smi('compute-apps=pid,used_memory', 'none')}", flush=True)
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
