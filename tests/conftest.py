"""Shared test setup and every shared fixture: offline data, fixed seeds, a running app, a headless browser,
the tabs' handlers, tiny pretrained models. Helpers that are not fixtures live in tests/support/."""

import contextlib
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
from support.app import REPO, serve
from support.browser import CHROMIUM_ARGS, SCREENSHOTS, find_chromium, new_page, page_state
# Tests never reach the Hugging Face Hub either: a test that reads GPT-2 points the app at a tiny
# folder it made, and anything else asking for "gpt2" gets core.pretrained's offline message at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# An app built from the environment (build_app()) starts no step worker processes unless a test asks:
# each would import torch, seconds of CPU per app (tests/test_room.py tests them).
os.environ.setdefault("PLAYGROUND_STEP_WORKERS", "off")

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


@pytest.fixture(scope="session")
def running_app():
    """The app launched once, shared by the integration and browser tests: (demo, url).

    `demo.registry` holds the sessions. Default caps, so tests see what a public server does;
    tests keep their models tiny.
    """
    with serve() as app:
        yield app


# ---------------------------------------------------------------- headless Chromium (whichever is here)


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that fails reports what its open pages said (a wait times out without saying what was
    there instead), and leaves their screenshots in tests/screenshots/."""
    report = yield
    chromium = item.funcargs.get("browser") if report.when == "call" and report.failed else None
    contexts = getattr(chromium, "contexts", [])  # a test's own parameter may be called "browser" too
    pages = [page for context in contexts for page in context.pages]
    for number, page in enumerate(pages):
        report.sections.append((f"page {number} when the test failed", page_state(page)))
        with contextlib.suppress(Exception):
            page.screenshot(path=str(SCREENSHOTS / f"failed-{item.name}-{number}.png"), full_page=True, timeout=10_000)
    return report


@pytest.fixture
def open_page(running_app, browser):
    """Open the app in new pages (`open_page(width, height, query)`, query as "?preset=..."); they close
    after the test."""
    pages = []

    def opener(width: int = 1366, height: int = 900, query: str = ""):
        pages.append(new_page(browser, running_app[1] + query, width, height))
        return pages[-1]

    yield opener
    for page in pages:
        page.close()


# ---------------------------------------------------------------- the tabs' handlers as plain functions


@pytest.fixture
def ctx():
    """The Train and Generate tabs' context (`support.handlers.make_ctx`)."""
    from support.handlers import make_ctx

    return make_ctx()


@pytest.fixture
def train(ctx):
    from playground.tabs.train import TrainHandlers

    return TrainHandlers(ctx)


@pytest.fixture
def attention_ctx():
    """The Attention tab's context, analyses capped at 20 tokens."""
    from support.handlers import make_attention_ctx

    return make_attention_ctx(max_attention_tokens=20)


@pytest.fixture
def handlers(attention_ctx):
    from playground.tabs.attention import AttentionHandlers

    return AttentionHandlers(attention_ctx)


# ---------------------------------------------------------------- tiny pretrained models, saved once


@pytest.fixture(scope="session")
def tiny_gpt2_folder(tmp_path_factory) -> str:
    from support.models import save_tiny_gpt2

    return save_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def tiny_llama_folder(tmp_path_factory) -> str:
    from support.models import saved, tiny_llama

    return saved(tiny_llama(), tmp_path_factory.mktemp("tiny-llama"))
