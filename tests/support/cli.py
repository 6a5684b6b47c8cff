"""The command line for tests: `python -m core` in a process of its own (`run_cli`), or its `main` in this one (`call_cli`).

Never imports a test module.
"""

import contextlib
import io
import os
import subprocess
import sys

from core.__main__ import main

from .app import REPO

TINY = ["--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set", "block_size=16",
        "--set", "eval_iters=2", "--batch-size", "4"]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m core ARGS` in a process of its own, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "core", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


def call_cli(*args: str) -> subprocess.CompletedProcess:
    """The same command through `core.__main__.main` in this process: its exit code, stdout and stderr
    as a process would give them, without a second of importing torch for each call."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's refusals
            code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    return subprocess.CompletedProcess(["python", "-m", "core", *args], code, out.getvalue(), err.getvalue())
