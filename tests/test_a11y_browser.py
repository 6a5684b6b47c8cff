"""Accessibility in headless Chromium: every control a learner needs works from the keyboard alone, and
axe-core finds no serious or critical violation on any tab, at a laptop's 1366 px and a phone's 390 px.

One page does it all, as one learner would: train from the keyboard (then Stop, then New model),
generate, analyse, train the baby GPT; then every tab is audited with its sections open. The
recoloured charts are photographed into tests/screenshots/ (git-ignored) for a person to look at.
"""

import pytest
from axe_playwright_python.base import AXE_SCRIPT

from playground.app import TABS
from support.browser import SCREENSHOTS, assert_no_errors, new_page, open_tab, set_number

pytestmark = pytest.mark.browser
LAPTOP, PHONE = {"width": 1366, "height": 900}, {"width": 390, "height": 844}
STEPS = 40  # the New model's run: enough for the charts to show something, a few seconds
FAILING = ("serious", "critical")
# Gradio's own markup (gradio 6.31), which the app cannot change: one rule on one selector each.
GRADIO_MARKUP = {
    # the placeholder of an empty Plot, File or HighlightedText: a div named "Empty value" with no role
    "aria-prohibited-attr": 'div.empty[aria-label="Empty value"]',
    # a Dataframe's search box (the per-head table's) is named by its title attribute only
    "label-title-only": "input.search-input",
    # a Dataframe's scroller (the per-head table's, wider than a phone): axe sees nothing focusable in
    # it, yet Tab reaches its first cell and the arrow keys move through the cells, scrolling it along
    # (tried by hand in Chromium 150)
    "scrollable-region-focusable": ".virtual-table-viewport",
}
# The charts whose colours come from the palette (playground.figures.PALETTE), photographed at 1366 px.
CHARTS = {"Train": ("loss-plot", "head-scores", "compare-loss"), "Attention": ("attention-summary", "attention-view"),
          "Baby GPT": ("baby-chain",)}


@pytest.fixture(scope="module")
def page(running_app, browser):
    page = new_page(browser, running_app[1], **LAPTOP)
    yield page
    page.close()


def press(page, selector: str, key: str) -> None:
    """Focus the element as Tab would and press `key` there: no mouse."""
    element = page.locator(selector)
    element.focus()
    assert element.evaluate("element => element === document.activeElement"), selector
    page.keyboard.press(key)


def test_every_control_works_from_the_keyboard(page):
    set_number(page, "Steps", 5000)  # a run long enough to stop
    press(page, "#train-button", "Enter")
    page.locator("#train-progress").filter(has_text="tokens/s").wait_for()
    page.keyboard.press("Tab")  # Stop comes next in the tab order
    assert page.evaluate("document.activeElement.id") == "stop-button"
    page.keyboard.press("Space")
    page.locator("#train-status").filter(has_text="Stopped at step").wait_for()
    set_number(page, "Steps", STEPS)
    press(page, "#new-model-button", "Enter")
    page.locator("#train-status").filter(has_text=f"Done: {STEPS} steps").wait_for()
    page.locator("#movie-note").filter(has_text=f"at step {STEPS}").wait_for()  # the scores in words
    press(page, "#compare .label-wrap", "Enter")  # a section opens too: the runs kept to compare
    page.locator("#compare-runs").get_by_text("Run 2").wait_for()  # the stopped run and the new one

    press(page, "#tab-generate-button", "Enter")
    press(page, "#generate-button", "Enter")
    page.locator("#generate-status").filter(has_text="tokens.").wait_for()

    press(page, "#tab-attention-button", "Enter")
    page.locator("#attention-text textarea").focus()
    page.keyboard.type("qwhzbkad|qwhzbkad")
    press(page, "#attention-run", "Enter")
    page.locator("#attention-status").get_by_text("17 tokens", exact=True).wait_for()
    page.locator("#attention-view-note").filter(has_text="looks most at").wait_for()  # the head view in words

    press(page, "#tab-baby-button", "Enter")
    press(page, "#baby-train", "Enter")
    page.locator("#baby-status").get_by_text("Trained 50 steps").wait_for()
    page.locator("#baby-step input[type=range]").focus()  # the replay slider: Home goes back to step 0
    page.keyboard.press("Home")
    page.wait_for_function("document.querySelector('#baby-chain .gtitle').textContent.startsWith('Step 0 /')")
    press(page, "#baby-walk", "Space")
    page.locator("#baby-walk-text").get_by_text("The chain writes").wait_for()
    assert_no_errors(page)


def test_no_serious_axe_violation_on_any_tab_at_either_width(page):
    failures = []
    for size in (LAPTOP, PHONE):
        page.set_viewport_size(size)
        for _, title, _ in TABS:
            open_tab(page, title)
            open_sections(page)
            for rule, impact, help_, targets in violations(page):
                line = f"{size['width']} px, {title}: {rule} ({impact}): {help_}: {', '.join(targets)}"
                print(line)  # the moderate and minor ones are only printed
                if impact in FAILING:
                    failures.append(line)
            if size == LAPTOP:
                for chart in CHARTS.get(title, ()):
                    page.locator(f"#{chart}").screenshot(path=str(SCREENSHOTS / f"a11y-{chart}.png"))
    assert not failures, "\n".join(failures)


def open_sections(page) -> None:
    """Open every closed accordion of the tab shown (those inside one appear once it opens)."""
    closed = page.locator(".tabitem:visible .label-wrap:not(.open):visible")
    for _ in range(20):  # more than any tab has
        if not closed.count():
            return
        closed.first.click()
    raise AssertionError("an accordion does not open")


def violations(page) -> list[tuple[str, str, str, list[str]]]:
    """axe's violations on the page as (rule, impact, help, the elements' selectors), less GRADIO_MARKUP's."""
    if not page.evaluate("typeof axe !== 'undefined'"):  # once a page: the app never reloads it
        page.evaluate(AXE_SCRIPT)  # axe-core as the package bundles it: nothing is fetched
    found = []
    for violation in page.evaluate("axe.run(document, {resultTypes: ['violations']})")["violations"]:
        rule = violation["id"]
        nodes = [node for node in violation["nodes"] if rule not in GRADIO_MARKUP or not page.evaluate(
            "([target, markup]) => document.querySelector(target).matches(markup)",
            [node["target"][0], GRADIO_MARKUP[rule]])]
        if nodes:
            found.append((rule, violation["impact"], violation["help"], [node["target"][0] for node in nodes]))
    return found
