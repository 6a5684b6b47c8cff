"""Shared test setup: offline data, small models, fixed seeds."""

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

# Tiny Shakespeare comes from ../shared/data (as in CI); tests never download it.
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- a running app (integration, browser)


def free_port() -> int:
    """A port the OS says is free right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def running_app():
    """The whole app launched once on a free port, shared by the integration and browser tests.

    Yields (demo, url); `demo.registry` holds the sessions. Default caps, so tests see what a
    public server does; tests keep their models tiny.
    """
    from playground.app import build_app, launch_kwargs
    from playground.settings import Settings

    settings = Settings.from_env({})
    demo = build_app(settings)
    port = free_port()
    demo.launch(**launch_kwargs(settings, port=port), prevent_thread_lock=True, quiet=True)
    try:
        yield demo, f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
