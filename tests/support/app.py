"""The app for tests: launched in this process for a block (`serve`), a free port, a gradio_client, a plot's figure, a wait.

Also the Train form of a tiny copy-task model in the API's order (`FORM`, a second or two of training)
and the Generate form a raw call sends (`GENERATE`), declared once for the handler, integration and
hostile tests. Never imports a test module.
"""

import contextlib
import dataclasses
import json
import socket
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
# A tiny model on the copy task (the Train form, in the API's order): about 2 ms a step.
FORM = dict(preset="repeat", corpus="repeat", tokenizer="char", stage="gpt", n_layer=1, n_head=2, n_embd=16,
            block_size=16, dropout=0.0, causal=True, scale_attention=True, use_position_embedding=True,
            steps=20, batch_size=8, learning_rate=3e-3, seed=1, warmup=2,
            eval_interval=10, weight_decay=0.01, grad_clip=1.0, text="", upload=None,
            position="learned", norm="layernorm", activation="gelu", n_kv_head=0, window=0)
# The Generate form: prompt, max new tokens, temperature, top-k, top-p, seed.
GENERATE = ["qwhzbkad|", 5, 0.8, 0, 1.0, 1, True]  # raw calls send every field, the stop at the line end too


def form(**changes) -> list:
    """FORM's values with `changes`, in the API's order: what a raw /train call sends."""
    return list({**FORM, **changes}.values())


def tiny_model_bytes() -> int:
    """The memory a FORM model claims while it trains."""
    import torch

    from core.model import GPT
    from core.presets import preset_configs, preset_corpus
    from playground.sessions import training_bytes

    _, tokenizer = preset_corpus("repeat")
    config, _ = preset_configs("repeat", tokenizer.vocab_size, **{k: FORM[k] for k in ("n_layer", "n_head", "n_embd",
                                                                                    "block_size", "dropout")})
    with torch.device("meta"):
        return training_bytes(GPT(config).parameter_counts()["total"])


def plotted(value):
    """A gr.Plot value as a plotly Figure to inspect, whether a handler built a Figure or its JSON."""
    import plotly.graph_objects as go

    return go.Figure(json.loads(value.plot)) if hasattr(value, "plot") else value


def api_client(url: str):
    """A gradio_client Client with room for a slow host: its own uploads would time out after httpx's 5 s."""
    from gradio_client import Client
    return Client(url, verbose=False, httpx_kwargs={"timeout": 60})


def free_port() -> int:
    """A port the OS says is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(settings=None, port: int | None = None):
    """The whole app launched on `port` (a free one if None) for the block: yields (demo, url)."""
    from playground.app import build_app, launch_kwargs
    from playground.settings import Settings

    settings = settings or Settings.from_env({})
    if settings.step_workers == "auto":  # no step worker processes unless a test asks for a number of them:
        settings = dataclasses.replace(settings, step_workers="off")  # each server's would import torch twice
    if settings.state_dir == Settings.from_env({}).state_dir:  # never the user's own store: one per server
        settings = dataclasses.replace(settings, state_dir=tempfile.mkdtemp(prefix="state-store-"))
    demo = build_app(settings)
    port = port or free_port()
    demo.launch(**launch_kwargs(settings, port=port, routes=demo.routes), prevent_thread_lock=True, quiet=True)
    try:
        yield demo, f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def wait_until(done, timeout: float = 60.0, what: str = "the condition", poll: float = 0.05) -> None:
    """Call `done` every `poll` seconds until it is true; fail, naming `what`, after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)
