"""Shared test setup: offline data, fixed seeds, a running app, a headless browser."""

import contextlib
import dataclasses
import hashlib
import os
import random
import shutil
import string
import tempfile
from pathlib import Path

import pytest
import torch

import core.data

REPO = Path(__file__).resolve().parent.parent
# Tests never reach the Hugging Face Hub either: a test that reads GPT-2 points the app at a tiny
# folder it made, and anything else asking for "gpt2" gets core.pretrained's offline message at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# ---------------------------------------------------------------- Tiny Shakespeare, offline
# Tests never download it. They read the real file from $PLAYGROUND_DATA_DIR or ../shared/data
# (as in CI); in a fresh clone elsewhere, from a stand-in (see pytest_configure).

SHAKESPEARE_CHARS = 1_115_394
SHAKESPEARE_ALPHABET = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase  # its 65 characters
STAND_IN_OPENING = "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
# The rare characters ($ & 3 - ' ; ? ! X Z J Q) appear here; the speakers and words bring the rest.
STAND_IN_PROLOGUE = "All:\nZounds! 3 crowns & a $ -- is't so? Xanthippe; Jaques, Quince: vex'd.\n\n"
SPEAKERS = ["ALL", "BRUTUS", "CLAUDIO", "DUKE VINCENTIO", "ESCALUS", "FRIAR LAURENCE", "GLOUCESTER",
            "HASTINGS", "ISABELLA", "JULIET", "KING RICHARD III", "LUCIO", "MENENIUS", "NURSE", "OXFORD",
            "PAULINA", "QUEEN ELIZABETH", "ROMEO", "SICINIUS", "TRANIO", "VOLUMNIA", "WARWICK", "YORK"]
WORDS = ("thou thee thy art hath doth lord love death king queen crown night day heart blood grace "
         "speak hear sweet fair noble good gentle honour father son brother sword jest quick vex "
         "zeal exeunt enter why what where when now o my your our and the of to a is not with "
         "but for so be this that shall will would come go hence away prithee sir madam").split()


def stand_in_shakespeare() -> str:
    """A deterministic play of Tiny Shakespeare's shape: its length, its 65 characters, its first
    line. What the tests assert of the real file holds for it; the words are made up."""
    rng = random.Random(0)
    parts, size = [STAND_IN_OPENING, STAND_IN_PROLOGUE], len(STAND_IN_OPENING) + len(STAND_IN_PROLOGUE)
    while size < SHAKESPEARE_CHARS:
        lines = []
        for _ in range(rng.randint(1, 4)):
            words = rng.choices(WORDS, k=rng.randint(4, 10))
            lines.append(" ".join(words).capitalize() + rng.choice(".,;:!?"))
        speech = f"{rng.choice(SPEAKERS)}:\n" + "\n".join(lines) + "\n\n"
        parts.append(speech)
        size += len(speech)
    text = "".join(parts)[: SHAKESPEARE_CHARS - 1] + "\n"
    assert sorted(set(text)) == sorted(SHAKESPEARE_ALPHABET)
    return text


def _real_shakespeare_dir() -> str | None:
    """The first of $PLAYGROUND_DATA_DIR and ../shared/data that holds tinyshakespeare/input.txt."""
    for folder in (os.environ.get(core.data.DATA_DIR_ENV), str(REPO.parent / "shared" / "data")):
        if folder and (Path(folder) / "tinyshakespeare" / "input.txt").is_file():
            return folder
    return None


def pytest_configure(config):
    """Point $PLAYGROUND_DATA_DIR at Tiny Shakespeare before any test module is imported.

    Without the real file, a stand-in is written to a temporary folder, and (in this process only)
    the loader's expected sha256 becomes the stand-in's: the loader's code still checks every file,
    refuses one that differs and accepts only the expected one."""
    real = _real_shakespeare_dir()
    if real is not None:
        os.environ[core.data.DATA_DIR_ENV] = real
        return
    folder = Path(tempfile.mkdtemp(prefix="stand-in-shakespeare-"))
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    data = stand_in_shakespeare().encode("ascii")
    (folder / "tinyshakespeare").mkdir()
    (folder / "tinyshakespeare" / "input.txt").write_bytes(data)
    patch = pytest.MonkeyPatch()
    config.add_cleanup(patch.undo)
    patch.setenv(core.data.DATA_DIR_ENV, str(folder))
    patch.setattr(core.data, "SHAKESPEARE_SHA256", hashlib.sha256(data).hexdigest())


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


def plotted(value):
    """A gr.Plot value as a plotly Figure to inspect, whether a handler built a Figure or its JSON."""
    import json

    import plotly.graph_objects as go

    return go.Figure(json.loads(value.plot)) if hasattr(value, "plot") else value


def api_client(url: str):
    """A gradio_client Client with room for a slow host: its own uploads would time out after httpx's 5 s."""
    from gradio_client import Client
    return Client(url, verbose=False, httpx_kwargs={"timeout": 60})


def free_port() -> int:
    """A port the OS says is free right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(settings=None, port: int | None = None):
    """The whole app launched on `port` (a free one if None) for the block: yields (demo, url)."""
    from playground.app import build_app, launch_kwargs
    from playground.settings import Settings

    settings = settings or Settings.from_env({})
    if settings.state_dir == Settings.from_env({}).state_dir:  # never the user's own store: one per server
        settings = dataclasses.replace(settings, state_dir=tempfile.mkdtemp(prefix="state-store-"))
    demo = build_app(settings)
    port = port or free_port()
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


# ---------------------------------------------------------------- headless Chromium (whichever is here)

CHROMIUM_ENV = "PLAYGROUND_CHROMIUM"  # a Chromium or Chrome to use, by its path
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")  # on PATH
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage"]
SCREENSHOTS = REPO / "tests" / "screenshots"  # git-ignored: for a person to look at


def find_chromium(bundled: str = "") -> str:
    """The Chromium the browser tests drive: $PLAYGROUND_CHROMIUM if set, else the first of CHROMIUM_NAMES
    on PATH, else `bundled` (Playwright's own download, `chromium.executable_path`) if it is there.
    LookupError, in one line that says how to get one, when there is none."""
    named = os.environ.get(CHROMIUM_ENV)
    on_path = (shutil.which(name) for name in CHROMIUM_NAMES)
    found = named or next((path for path in on_path if path), None) or bundled
    if found and Path(found).is_file():
        return found
    looked = (f"{CHROMIUM_ENV}={named} is not a file" if named
              else f"looked for ${CHROMIUM_ENV}, then {', '.join(CHROMIUM_NAMES)} on PATH, then Playwright's own")
    raise LookupError(f"the browser tests need Chromium or Chrome and found none ({looked}): install one "
                      "(apt-get install chromium, dnf install chromium, brew install --cask chromium, or "
                      f".venv/bin/playwright install chromium) or set {CHROMIUM_ENV} to its path")


@pytest.fixture(scope="session")
def playwright_api():
    """Playwright's sync API, started once (it cannot be started twice in one thread)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_api):
    """One Chromium for every browser test; missing Chromium is a failure, not a skip."""
    try:
        executable = find_chromium(playwright_api.chromium.executable_path)
    except LookupError as error:
        pytest.fail(str(error), pytrace=False)
    SCREENSHOTS.mkdir(exist_ok=True)
    chromium = playwright_api.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()
