"""The Ladder tab in headless Chromium: one click climbs every rung (at the slider's minimum), the chart
overlays their curves and the lecture's figures, and the table fills with their losses; the climbed ladder
is then looked at on a desktop's 1366x900 and a phone's 390x844. Screenshots go to tests/screenshots/ for a person to look at.
"""

import re

import pytest
from support.browser import SCREENSHOTS, record_texts, recorded_texts, wait_until_fits

from core.ladder import RUNGS
from playground.tabs import ladder as tab

pytestmark = pytest.mark.browser
LOSS = re.compile(r"^\d\.\d{3}$")
# The table's rows as the page shows them (its virtual list holds every rung without scrolling).
ROWS = """() => [...document.querySelectorAll('#ladder-table [role=row][aria-rowindex]')]
  .map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()))
  .filter(cells => cells.length && cells[0] !== '')"""


def open_ladder_tab(page) -> None:
    """The Ladder tab, from the tab bar or, on a phone, from Gradio's "More tabs" menu."""
    page.locator("#train-button").wait_for()
    tab_button = page.get_by_role("tab", name="Ladder")
    if tab_button.count() and tab_button.is_visible():
        tab_button.click()
    else:
        page.get_by_role("button", name="More tabs").click()
        page.locator(".overflow-dropdown button", has_text="Ladder").click()
    page.locator("#ladder-table [role=gridcell]").first.wait_for()


def whole_page_shot(page, name: str) -> None:
    """The whole page, through a viewport as tall as the page (Chromium's full-page capture can leave
    parts of a long phone page unpainted)."""
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": page.evaluate("document.documentElement.scrollHeight")})
    page.wait_for_function("() => true")  # let it lay out at that size
    page.screenshot(path=str(SCREENSHOTS / name))
    page.set_viewport_size(size)


def test_one_click_climbs_the_whole_ladder(running_app, browser, monkeypatch):
    _, url = running_app
    monkeypatch.setattr(tab, "EVAL_ITERS", 2)  # the page is under test, not the losses' precision: a quicker climb
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.set_default_timeout(120_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url, wait_until="domcontentloaded")
    open_ladder_tab(page)
    # before any climb: every rung pending beside the lecture's figure, and a chart that says what comes
    rows = page.evaluate(ROWS)
    assert [row[:3] for row in rows] == [
        [f"{i}. {stage.title}", tab.PENDING, "" if stage.lecture_loss is None else f"{stage.lecture_loss:.2f}"]
        for i, stage in enumerate(RUNGS.values(), 1)]
    page.locator("#ladder-plot").get_by_text("Press Climb the ladder").wait_for()

    steps = page.get_by_label("number input for Steps per rung")
    steps.fill(str(tab.MIN_STEPS))
    steps.press("Enter")
    record_texts(page, "#ladder-status")  # a climb can end in a few seconds: its progress is looked for afterwards
    page.locator("#ladder-train").click()
    climbed = f"Climbed all {len(RUNGS)} rungs ({tab.MIN_STEPS} steps each)"
    page.locator("#ladder-status").get_by_text(climbed).wait_for()
    shown = recorded_texts(page, "#ladder-status")
    assert any(re.search(rf"Rung \d of {len(RUNGS)}", text) for text in shown), shown  # it showed its progress
    page.wait_for_function(f"() => ({ROWS})().filter(r => /^\\d\\.\\d{{3}}$/.test(r[1])).length === {len(RUNGS)}")
    rows = page.evaluate(ROWS)
    assert all(LOSS.match(row[1]) for row in rows), rows

    # a curve per rung, each with its title in the legend, and the lecture's five figures dotted
    plot = page.locator("#ladder-plot")
    legend = plot.locator(".legendtext").evaluate_all("texts => texts.map(t => t.textContent)")  # SVG: no innerText
    assert legend == [row[0] for row in rows]
    assert plot.locator(".scatterlayer .trace").count() == len(RUNGS) + sum(s.lecture_loss is not None for s in RUNGS.values())
    for width, height in ((1366, 900), (390, 844)):  # the climbed ladder on a laptop, then on a phone
        page.set_viewport_size({"width": width, "height": height})
        page.locator("#ladder-plot").scroll_into_view_if_needed()
        wait_until_fits(page, "#ladder-plot .main-svg", width)  # the chart fits the screen

        # the table's headers each on one line; the rung, its loss and the lecture's figure in view
        headers = page.locator("#ladder-table th span.header")
        lines = headers.evaluate_all("spans => spans.map(s => [s.innerText, s.getClientRects().length])")
        assert lines and all(count == 1 for _, count in lines), lines
        lecture = page.locator("#ladder-table th", has_text="lecture").bounding_box()
        assert lecture["x"] + lecture["width"] <= width

        page.locator("#ladder-plot").screenshot(path=str(SCREENSHOTS / f"ladder_plot_{width}.png"))
        whole_page_shot(page, f"ladder_tab_{width}.png")
    assert page.locator(".toast-body.error").count() == 0 and not errors, errors
    page.close()
