"""A stand-in for Hugging Face's `spaces` package on a ZeroGPU Space, for tests (on sys.path only in them).

`GPU(duration=...)` works as the real decorator does on ZeroGPU for a generator function: each call asks
for `duration` seconds of the visitor's quota (refused with a `gr.Error` when less is left, as `spaces`
refuses), then runs the function in a worker process forked from the server, its arguments and every
item it yields pickled across. Off ZeroGPU (`config.Config.zero_gpu` false) the decorator returns the
function unchanged, as the real one does.

    calls        every call: (the worker's pid, the duration asked for); `refused` counts refusals
    quota_s      the quota left, in seconds (None: unlimited); FAKE_ZERO_GPU_QUOTA_S sets it at import
    fail_after   a worker that dies after this many items (None: never), as a crashed worker does
"""

import functools
import multiprocessing
import os
import pickle
import traceback

import gradio as gr

from .config import Config

calls: list[tuple[int, int]] = []
refused = 0
quota_s: float | None = float(os.environ["FAKE_ZERO_GPU_QUOTA_S"]) if os.environ.get("FAKE_ZERO_GPU_QUOTA_S") else None
fail_after: int | None = None

_FORK = multiprocessing.get_context("fork")
_END = "end"


def GPU(task=None, *, duration: int = 60):
    if task is None:
        return functools.partial(GPU, duration=duration)
    if not Config.zero_gpu:
        return task

    @functools.wraps(task)
    def on_gpu(*args, **kwargs):
        global quota_s, refused
        if quota_s is not None and quota_s < duration:
            refused += 1
            raise gr.Error(f"You have exceeded your free ZeroGPU quota ({duration}s requested vs. {quota_s:g}s left).",
                           title="ZeroGPU quota exceeded")
        if quota_s is not None:
            quota_s -= duration
        sent = pickle.dumps((args, kwargs))  # as `spaces` sends them to its worker: a value, not shared memory
        results = _FORK.SimpleQueue()
        worker = _FORK.Process(target=_work, args=(task, sent, results, fail_after), daemon=True)
        worker.start()
        calls.append((worker.pid, duration))
        kind = None
        try:
            while kind != _END:
                kind, value = results.get()
                if kind == "error":
                    raise gr.Error(value, title="ZeroGPU worker error")
                if kind == "item":
                    yield pickle.loads(value)
        finally:
            if kind != _END:  # closed early, as when the visitor leaves: the worker stops (spaces stops it too)
                worker.terminate()
            worker.join()

    return on_gpu


def _work(task, sent: bytes, results, fail_after) -> None:
    try:
        args, kwargs = pickle.loads(sent)
        for count, item in enumerate(task(*args, **kwargs)):
            if fail_after is not None and count == fail_after:
                results.put(("error", "GPU task aborted"))
                return
            results.put(("item", pickle.dumps(item)))  # a copy, not tensors shared through a file descriptor
        results.put((_END, None))
    except Exception:
        results.put(("error", traceback.format_exc(limit=1)))
