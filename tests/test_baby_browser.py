"""The Baby GPT tab in headless Chromium: the chain before and after training (and every frame
between, as the page drew it), a walk, a temperature change, and a longer run caught while it
trains; and the tab trained at a desktop's 1366x900, then the same page narrowed to a phone's 390x844.
Screenshots at both widths go to tests/screenshots/ for a person to look at.
"""

import itertools
import re

import pytest

from playground.tabs import baby as tab
from support.browser import SCREENSHOTS, wait_until_fits

pytestmark = pytest.mark.browser
SLOW_REPLAY_S = 6.0
TITLE = re.compile(r"Step (\d+) / (\d+)")
TITLES = "babyTitles"
# Records every title the chain plot shows, with its time, as the page draws it.
RECORD_TITLES = f"""() => {{
  window.{TITLES} = [];
  const root = document.querySelector('#baby-chain');
  new MutationObserver(() => {{
    const title = root.querySelector('.gtitle');
    const text = title ? title.textContent : '';
    const log = window.{TITLES};
    if (text && (!log.length || log[log.length - 1][1] !== text)) log.push([performance.now(), text]);
  }}).observe(root, {{subtree: true, childList: true, characterData: true}});
}}"""


def chain_title(page) -> str:
    title = page.locator("#baby-chain .gtitle")
    return title.first.text_content() if title.count() else ""


def test_chain_animates_while_training_then_walks(running_app, browser, monkeypatch):
    _, url = running_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_role("tab", name="Baby GPT").click()
    chain = page.locator("#baby-chain")
    chain.locator(".gtitle").wait_for(timeout=30_000)
    assert chain_title(page).startswith("Step 0 / 50")  # the untrained default model
    assert chain.locator(".legendtext").filter(has_text="never in the data").count() == 1
    chain.screenshot(path=str(SCREENSHOTS / "baby_before.png"))

    # Paced to 3 s (the app's default is MIN_ANIMATION_S): the server then sends ~15 frames, and
    # even a loaded 2-core CI machine, where the page may coalesce updates, draws several of them.
    monkeypatch.setattr(tab, "MIN_ANIMATION_S", 3.0)
    page.evaluate(RECORD_TITLES)  # in the page: polling from here would miss fast frames
    page.locator("#baby-train").click()
    page.locator("#baby-status").get_by_text("Trained 50 steps").wait_for(timeout=60_000)
    assert chain_title(page).startswith("Step 50 / 50")
    shown = [int(TITLE.search(title).group(1)) for _, title in page.evaluate(f"window.{TITLES}")]
    # the browser showed the chain forming step by step, not just its end
    assert shown == sorted(shown) and shown[-1] == 50
    assert len(set(shown) - {0, 50}) >= 4, shown
    page.locator("#baby-analysis").get_by_text("011 → 111 → 110 → 101 → 011").wait_for(timeout=10_000)
    page.locator("#baby-comparison .heatmaplayer").first.wait_for(timeout=10_000)
    chain.screenshot(path=str(SCREENSHOTS / "baby_after.png"))
    page.screenshot(path=str(SCREENSHOTS / "baby_tab.png"), full_page=True)

    # a walk drawn on the graph, then a temperature change redraws the edges (and clears it)
    page.locator("#baby-walk").click()
    page.locator("#baby-walk-text").get_by_text("The chain writes").wait_for(timeout=15_000)
    chain.locator(".legendtext").filter(has_text="walk: 30 steps").wait_for(timeout=10_000)
    chain.screenshot(path=str(SCREENSHOTS / "baby_walk.png"))
    number = page.locator("#baby-temperature input[type=number]")
    number.fill("0.3")
    number.press("Enter")
    page.locator("#baby-status").get_by_text("temperature 0.3").wait_for(timeout=15_000)
    assert chain.locator(".legendtext").filter(has_text="walk:").count() == 0
    chain.screenshot(path=str(SCREENSHOTS / "baby_cold.png"))

    # The default run plays in about a second: replayed slower (the app runs in this process),
    # it can be photographed mid-way even on a busy machine.
    monkeypatch.setattr(tab, "MIN_ANIMATION_S", SLOW_REPLAY_S)
    page.locator("#baby-train").click()
    page.wait_for_function(
        "/Step ([1-3][0-9]|40) \\/ 50/.test(document.querySelector('#baby-chain .gtitle').textContent)",
        timeout=30_000)
    # (on a very busy machine the picture may land after the end; the frames are checked above)
    chain.screenshot(path=str(SCREENSHOTS / "baby_during.png"))
    page.locator("#baby-status").get_by_text("Trained 50 steps").wait_for(timeout=60_000)
    assert page.locator(".toast-body.error").count() == 0
    page.close()


# ---------------------------------------------------------------- a desktop and a phone

DESKTOP, PHONE = {"width": 1366, "height": 900}, {"width": 390, "height": 844}
EDGE_LABEL = re.compile(r"^\d \(\d+%\)$")
# Every text box of the chain plot, in page pixels: [text, left, top, right, bottom].
TEXT_BOXES = """() => [...document.querySelectorAll('#baby-chain .textpoint text')].map(t => {
  const r = t.getBoundingClientRect();
  return [t.textContent, r.left, r.top, r.right, r.bottom];
})"""


def open_baby_tab(page) -> None:
    """The Baby GPT tab, from the tab bar or, on a phone, from its overflow menu."""
    tab = page.get_by_role("tab", name="Baby GPT")
    if tab.count() and tab.is_visible():
        tab.click()
    else:
        page.get_by_label("More tabs").click()
        page.get_by_role("button", name="Baby GPT").click()


def whole_page_shot(page, name: str) -> None:
    """The whole page, shot through a viewport as tall as the page: Chromium's full-page capture
    left the sliders and buttons under the chain unpainted at phone width."""
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": page.evaluate("document.documentElement.scrollHeight")})
    page.locator("#baby-walk").wait_for()
    page.screenshot(path=str(SCREENSHOTS / name))
    page.set_viewport_size(size)


def overlap(a: list, b: list) -> float:
    """The area two [text, left, top, right, bottom] boxes share, in square pixels."""
    width = min(a[3], b[3]) - max(a[1], b[1])
    height = min(a[4], b[4]) - max(a[2], b[2])
    return max(width, 0) * max(height, 0)


def assert_vocab_on_one_line(page) -> None:
    """V's three choices on one line (at 1366 px its "4" used to wrap onto a line of its own)."""
    choices = page.locator("#baby-vocab label")
    assert choices.count() == 3
    tops = {round(choices.nth(i).bounding_box()["y"]) for i in range(3)}
    assert len(tops) == 1, tops


def assert_chain_reads_well(page, width: int) -> dict:
    """The trained chain fits a `width`-pixel screen, its graph as wide as the plot allows, its edge labels
    apart; shot, with the whole tab. Returns the plot's box."""
    chain = page.locator("#baby-chain")
    plot = wait_until_fits(page, "#baby-chain .main-svg", width)  # once Plotly has redrawn at this width
    assert plot["x"] >= 0 and plot["x"] + plot["width"] <= width  # the chain fits the screen

    # the graph is as wide as the plot allows, and its edge labels do not pile up
    boxes = page.evaluate(TEXT_BOXES)
    states = [box for box in boxes if re.fullmatch(r"[01]{3}", box[0])]
    labels = [box for box in boxes if EDGE_LABEL.match(box[0])]
    assert len(states) == 8 and len(labels) == 16
    span = max(box[3] for box in states) - min(box[1] for box in states)
    assert span >= 0.5 * plot["width"] if width < 600 else span >= 280, span
    for a, b in itertools.combinations(labels, 2):
        assert overlap(a, b) <= 0.1 * (a[3] - a[1]) * (a[4] - a[2]), (a, b)  # at most a sliver
    chain.screenshot(path=str(SCREENSHOTS / f"baby_chain_{width}.png"))
    whole_page_shot(page, f"baby_tab_{width}.png")
    return plot


def assert_cold_title_shows(page, plot: dict, width: int) -> None:
    """A colder chain says so in its title, and the whole title shows within the plot."""
    chain = page.locator("#baby-chain")
    title = chain_title(page)
    assert title.startswith("Step 50 / 50 · loss ") and title.endswith(" · temperature 0.3")
    title_box = chain.locator(".gtitle").first.bounding_box()
    assert title_box["x"] + title_box["width"] <= plot["x"] + plot["width"]  # the whole title shows
    chain.screenshot(path=str(SCREENSHOTS / f"baby_chain_cold_{width}.png"))


def test_chain_and_controls_read_well_on_a_desktop_and_a_phone(running_app, browser):
    # trained once on a desktop, then the same page on a phone (cooled there), then back on the desktop
    _, url = running_app
    page = browser.new_page(viewport=DESKTOP)
    page.set_default_timeout(90_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url, wait_until="domcontentloaded")
    page.locator("#train-button").wait_for()
    open_baby_tab(page)
    chain = page.locator("#baby-chain")
    chain.locator(".gtitle").wait_for()
    assert_vocab_on_one_line(page)

    page.locator("#baby-train").click()
    page.locator("#baby-status").get_by_text("Trained 50 steps").wait_for()
    page.wait_for_function("/Step 50 \\/ 50/.test(document.querySelector('#baby-chain .gtitle').textContent)")
    desktop_plot = assert_chain_reads_well(page, DESKTOP["width"])

    page.set_viewport_size(PHONE)
    open_baby_tab(page)  # still reachable on a phone, where it may sit in the "More tabs" menu
    assert_vocab_on_one_line(page)
    phone_plot = assert_chain_reads_well(page, PHONE["width"])

    number = page.locator("#baby-temperature input[type=number]")
    number.fill("0.3")
    number.press("Enter")
    page.locator("#baby-status").get_by_text("temperature 0.3").wait_for()
    page.wait_for_function("/temperature 0\\.3$/.test(document.querySelector('#baby-chain .gtitle').textContent)")
    assert_cold_title_shows(page, phone_plot, PHONE["width"])

    page.set_viewport_size(DESKTOP)  # wait for Plotly to redraw at the desktop's width again
    page.wait_for_function(f"() => Math.abs(document.querySelector('#baby-chain .main-svg')"
                           f".getBoundingClientRect().width - {desktop_plot['width']}) <= 1")
    assert_cold_title_shows(page, chain.locator(".main-svg").first.bounding_box(), DESKTOP["width"])
    assert page.locator(".toast-body.error").count() == 0 and not errors, errors
    page.close()
