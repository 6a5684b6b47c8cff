"""Memory of the running app under hostile uploads and a load run, measured from outside.

    .venv/bin/python tests/bench/bench_memory.py [--sessions 20] [--failing 300]

Starts `python -m playground` (default caps) on a free port in a subprocess and prints:
1. the server's idle RSS (the baseline, after one warm-up call of each kind);
2. for each upload, the rise of the server's *peak* RSS while it is processed (the kernel's
   high-water mark, reset before each upload): a checkpoint claiming a huge model, zip bombs in
   the weights and in the training state, NaN weights, and the largest checkpoints the caps allow
   (weights only, and weights with the optimizer's state);
3. a load run: N sessions open the page (so the state store keeps their models, as a browser's),
   train, generate and analyse attention, then many failing calls; the peak RSS's rise against the
   server's budget for models, and the store's bytes on disk against its budget (set small, so
   that it must evict); then RSS after every session is closed (its page closed: the heartbeat ends)
   and the sweep has run: how far above the baseline it stays.
Every request goes over raw HTTP with its own session hash, as tests/test_hostile.py sends them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from core.checkpoint import save_archive  # noqa: E402
from core.config import GPTConfig  # noqa: E402
from core.data import TokenData, corpus_text  # noqa: E402
from core.model import GPT  # noqa: E402
from core.tokenizers import CharTokenizer, GPT2Tokenizer  # noqa: E402
from core.config import TrainConfig  # noqa: E402
from core.train import Trainer  # noqa: E402
from tests.support.app import FORM, GENERATE, free_port  # noqa: E402
from tests.support.hostile import Hostile  # noqa: E402


def proc_status(pid: int, key: str) -> float:
    """A /proc/PID/status memory figure in MB (VmRSS now, VmHWM the peak since the last reset)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key}")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux: the high-water mark restarts from now


class Server:
    """`python -m playground` in a subprocess, driven like tests/test_hostile.py's Hostile."""

    def __init__(self, state_dir: Path, state_budget: int, model_budget: int) -> None:
        port = free_port()
        env = dict(os.environ, PLAYGROUND_API_TTL_S="5", PLAYGROUND_STATE_DIR=str(state_dir),
                   PLAYGROUND_STATE_BUDGET_BYTES=str(state_budget), PLAYGROUND_MODEL_MEMORY_BYTES=str(model_budget))
        self.process = subprocess.Popen([sys.executable, "-m", "playground", "--port", str(port)], cwd=REPO, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.2)
        self.http = Hostile(f"http://127.0.0.1:{port}/")

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)


# ---------------------------------------------------------------- checkpoints


def archive(model: GPT, tokenizer, trainer_state: dict | None = None, edit=None) -> bytes:
    """`save_archive`'s bytes, with `edit(name, bytes) -> bytes` applied to each member if given."""
    with tempfile.TemporaryDirectory() as folder:
        path = save_archive(Path(folder) / "c.zip", model, tokenizer, trainer_state=trainer_state)
        if edit is None:
            return path.read_bytes()
        buffer = io.BytesIO()
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as dst:
            for name in src.namelist():
                dst.writestr(name, edit(name, src.read(name)))
        return buffer.getvalue()


def tiny() -> tuple[GPT, CharTokenizer]:
    return GPT(GPTConfig(vocab_size=2, block_size=4, n_layer=1, n_head=1, n_embd=8)), CharTokenizer.from_text("ab")


def uploads() -> dict[str, bytes]:
    """What each upload case sends."""
    cases = {}
    model, tokenizer = tiny()

    def lying_config(name: str, data: bytes) -> bytes:
        if name != "config.json":
            return data
        description = json.loads(data)
        description["model"]["n_embd"] = 4096
        return json.dumps(description).encode()

    cases["config claims n_embd 4096"] = archive(model, tokenizer, edit=lying_config)
    cases["weights expand to 1.9 GB"] = archive(
        model, tokenizer, edit=lambda n, d: b"\0" * 1_900_000_000 if n == "model.safetensors" else d)
    text = corpus_text("repeat")
    chars = CharTokenizer.from_text(text)
    small = GPT(GPTConfig(vocab_size=chars.vocab_size, block_size=8, n_layer=1, n_head=1, n_embd=8))
    cases["training state expands to 2.5 GB"] = archive(
        small, chars, trained_state(small, text, chars),
        edit=lambda n, d: b"\0" * 2_500_000_000 if n == "trainer.safetensors" else d)
    nan_model, _ = tiny()
    with torch.no_grad():
        for p in nan_model.parameters():
            p.fill_(float("nan"))
    cases["NaN weights"] = archive(nan_model, tokenizer)
    # The largest models the default caps accept: GPT-2 BPE's embedding makes the weights-only one.
    biggest = GPT(GPTConfig(vocab_size=50257, block_size=256, n_layer=6, n_head=8, n_embd=128, tie_weights=True))
    cases[f"largest allowed, weights only ({biggest.parameter_counts()['total'] / 1e6:.1f}M params)"] = archive(
        biggest, GPT2Tokenizer())
    del biggest
    # With the optimizer's state, a download must stay under the 40 MB upload cap: about 3M parameters.
    config = GPTConfig(vocab_size=chars.vocab_size, block_size=256, n_layer=4, n_head=8, n_embd=248)
    with_state = GPT(config)
    cases[f"with training state ({with_state.parameter_counts()['total'] / 1e6:.1f}M params)"] = archive(
        with_state, chars, trained_state(with_state, text, chars))
    return cases


def trained_state(model: GPT, text: str, tokenizer: CharTokenizer) -> dict:
    """The training state after one step: AdamW's moments exist for every parameter."""
    trainer = Trainer(model, TokenData.from_text(text, tokenizer, model.config.block_size),
                      TrainConfig(max_iters=1, eval_interval=1, eval_iters=1, batch_size=2))
    list(trainer.run())
    return trainer.state_dict()


# ---------------------------------------------------------------- the run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20, help="sessions in the load run")
    parser.add_argument("--failing", type=int, default=300, help="failing calls in the load run")
    parser.add_argument("--store-budget-mb", type=float, default=1.0,
                        help="the state store's budget (small: the load run's models take more)")
    parser.add_argument("--model-budget-mb", type=float, default=512.0, help="the server's memory for models")
    args = parser.parse_args()

    cases = uploads()
    state_dir = Path(tempfile.mkdtemp(prefix="bench-memory-state-"))
    server = Server(state_dir, int(args.store_budget_mb * 2**20), int(args.model_budget_mb * 2**20))
    http = server.http
    try:
        form = list(FORM.values())
        http.ok("train", form, "warm-up")
        http.ok("generate", GENERATE, "warm-up")
        http.ok("attention", ["qwhzbkad|qwhzbka"], "warm-up")
        http.close_page("warm-up")
        time.sleep(2)
        baseline = proc_status(server.pid, "VmRSS")
        print(f"idle RSS (baseline, after a warm-up session): {baseline:.0f} MB")

        print(f"\n{'upload':44s} {'size':>8s}  {'peak rise':>9s}  {'above baseline':>14s}   answer")
        for name, content in cases.items():
            upload = http.upload("checkpoint.zip", content)
            before = proc_status(server.pid, "VmRSS")
            reset_peak(server.pid)
            answer = http.call("load_checkpoint", [upload], f"upload-{name}")
            peak = proc_status(server.pid, "VmHWM")
            said = "loaded" if answer["success"] else "refused: " + answer["output"]["error"][:60]
            print(f"{name:44s} {len(content) / 1e6:5.2f} MB  {peak - before:6.0f} MB  {peak - baseline:11.0f} MB   {said}")
            http.close_page(f"upload-{name}")

        started = time.monotonic()
        reset_peak(server.pid)
        keys = [f"learner-{i}" for i in range(args.sessions)]

        def learner(key: str) -> None:
            http.ok("come_back", [None, None], key)  # the page's load: the session's token for the store
            http.ok("train", form, key)
            http.ok("generate", GENERATE, key)
            http.ok("attention", ["qwhzbkad|qwhzbka"], key)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(learner, keys))
            bad = [form[:5] + ["abc"] + form[6:], form[:11] + [float("nan")] + form[12:]]
            list(pool.map(lambda i: http.call("train", bad[i % 2], f"failing-{i}"), range(args.failing)))
        loaded = proc_status(server.pid, "VmRSS")
        print(f"\nload run: {args.sessions} sessions trained, generated and analysed, {args.failing} failing "
              f"calls, in {time.monotonic() - started:.0f} s: RSS {loaded:.0f} MB; its peak "
              f"{proc_status(server.pid, 'VmHWM') - baseline:+.0f} MB from the baseline, against "
              f"{args.model_budget_mb:.0f} MB for models")
        time.sleep(2)  # the store's writer thread finishes
        kept = [path for path in state_dir.rglob("*") if path.is_file()]
        print(f"state store on disk: {sum(path.stat().st_size for path in kept) / 2**20:.2f} MB in {len(kept)} files, "
              f"against its budget of {args.store_budget_mb:g} MB")
        for key in keys:
            http.close_page(key)
        time.sleep(8)  # the failing calls' light sessions go after the 5 s time-to-live set above
        http.call("preset", ["repeat"], "after")  # any request; the sweeper runs on its own too
        time.sleep(2)
        after = proc_status(server.pid, "VmRSS")
        print(f"after every session closed: RSS {after:.0f} MB, {after - baseline:+.0f} MB from the baseline")
    finally:
        server.close()


if __name__ == "__main__":
    main()
