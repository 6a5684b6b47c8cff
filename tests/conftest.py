"""Shared test setup: offline data, fixed seeds, a running app, a headless browser."""

import contextlib
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


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One thread per op, as the app runs (playground.app.configure_torch): tiny models run
    fastest so, and a busy 2-core machine does not oversubscribe."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# ---------------------------------------------------------------- a running app (integration, browser)


def free_port() -> int:
    """A port the OS says is free right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(settings=None):
    """The whole app launched on a free port for the block: yields (demo, url)."""
    from playground.app import build_app, launch_kwargs
    from playground.settings import Settings

    settings = settings or Settings.from_env({})
    demo = build_app(settings)
    port = free_port()
    demo.launch(**launch_kwargs(settings, port=port), prevent_thread_lock=True, quiet=True)
    try:
        yield demo, f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.fixture(scope="session")
def running_app():
    """The app launched once, shared by the integration and browser tests: (demo, url).

    `demo.registry` holds the sessions. Default caps, so tests see what a public server does;
    tests keep their models tiny.
    """
    with serve() as app:
        yield app


# ---------------------------------------------------------------- headless Chromium (Debian's)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage"]
SCREENSHOTS = REPO / "tests" / "screenshots"  # git-ignored: for a person to look at


@pytest.fixture(scope="session")
def browser():
    """One Chromium for every browser test; missing Chromium is a failure, not a skip."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"the browser tests need Debian's Chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
