"""Headless Chromium for the browser tests: finding one, a learner's new page, its tabs and fields, no errors on it.

A page waits for an element, never for "networkidle" (Gradio's heartbeat keeps the network busy).
Never imports a test module.
"""

import os
import re
import shutil
from pathlib import Path

from .app import REPO, wait_until

TIMEOUT_MS = 90_000  # generous: other jobs share these 2 cores
LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
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


def launch_niced(playwright, executable: str, folder: Path, niceness: int):
    """A second Chromium whose every process takes the CPU after everything else on this machine: pages that stand
    for other people's devices, so that on one host their drawing leaves the cores to the server and to the page a
    test measures. Run through `nice`; as root also without the capability to lower a niceness (CAP_SYS_NICE), since
    Chromium run as root sets its browser process to -8 and its renderers to 0 again."""
    launcher = folder / "chromium-niced"
    launcher.write_text("#!/bin/sh\n"
                        f'[ "$(id -u)" = 0 ] && exec setpriv --bounding-set -sys_nice --inh-caps -sys_nice '
                        f'nice -n {niceness} "{executable}" "$@"\n'
                        f'exec nice -n {niceness} "{executable}" "$@"\n')
    launcher.chmod(0o755)
    return playwright.chromium.launch(executable_path=str(launcher), args=CHROMIUM_ARGS)


def new_page(browser, url: str, width: int = 1366, height: int = 900, ready: bool = True, **options):
    """A new page (its own session) on the app, errors recorded, once the Train tab is up (or as soon as the
    server answers, if not `ready`: pages then load side by side); `options` go to Playwright's `browser.new_page`."""
    page = browser.new_page(viewport={"width": width, "height": height}, **options)
    page.set_default_timeout(TIMEOUT_MS)
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(url, wait_until="domcontentloaded" if ready else "commit")
    if ready:
        page.locator("#train-button").wait_for()
    return page


def open_tab(page, title: str) -> None:
    """Click a tab; on a narrow screen the later tabs sit in Gradio's "More tabs" menu."""
    tab, more = page.get_by_role("tab", name=title), page.get_by_role("button", name="More tabs")
    tab.or_(more).first.wait_for()  # the page may still be drawing its tabs
    if tab.count():
        tab.click()
    else:
        more.click()
        page.locator(".overflow-dropdown button", has_text=title).click()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def assert_no_errors(page) -> None:
    """No error toast, no component in an error state, no uncaught script error."""
    toasts = page.locator(".toast-body.error, [data-testid='toast-body'].error")
    assert toasts.count() == 0, toasts.all_inner_texts()
    assert page.locator(".error, [class*='error-']").filter(has_text=re.compile(r"\bError\b")).count() == 0
    assert not page.errors, page.errors


def record_texts(page, selector: str) -> None:
    """Keep every text the element at `selector` shows from now on (see `recorded_texts`): a state that lasts a
    moment, on a fast run, can be gone before a wait for it looks."""
    page.evaluate("""selector => { const element = document.querySelector(selector), texts = [];
        (window.recordedTexts ??= {})[selector] = texts;
        new MutationObserver(() => texts.push(element.innerText))
            .observe(element, {subtree: true, childList: true, characterData: true}); }""", selector)


def recorded_texts(page, selector: str) -> list[str]:
    """The texts the element at `selector` has shown since `record_texts`."""
    return page.evaluate("selector => window.recordedTexts[selector]", selector)


# What a failed browser test prints of each open page: every status line and note a wait is likely to have been for.
PAGE_STATE = """() => [...document.querySelectorAll('[id$="-status"], [id$="-next"], [id$="-note"], .toast-body')]
    .map(element => [element.id || 'toast', element.innerText.trim()]).filter(([, text]) => text)
    .map(([name, text]) => `${name}: ${text}`)"""


def page_state(page) -> str:
    """The page's address and visible status lines and notes, for a failed test's report."""
    try:
        return "\n".join([page.url, *page.evaluate(PAGE_STATE)])
    except Exception as error:  # a closed or crashed page: say so, the test's own failure is the news
        return f"(the page could not be read: {error})"


def wait_until_fits(page, selector: str, width: int) -> dict:
    """After a resize, wait until the figure at `selector` lies within `width` pixels (Plotly redraws on
    the window's resize event, a moment later), and return its box."""
    page.wait_for_function(f"() => {{ const box = document.querySelector({selector!r}).getBoundingClientRect(); "
                           f"return box.left >= 0 && box.right <= {width} + 1; }}")
    return page.locator(selector).first.bounding_box()


def set_number(page, label: str, value) -> None:
    box = page.get_by_label(f"number input for {label}")
    box.fill(str(value))
    box.press("Enter")


def browser_session(registry, before: set):
    """The session the page's load event created (marked as a browser's)."""
    wait_until(lambda: any(s.browser for k, s in registry._sessions.items() if k not in before), what="the page")
    return next(s for k, s in registry._sessions.items() if k not in before and s.browser)
