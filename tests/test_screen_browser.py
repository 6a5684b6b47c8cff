"""What a new user met on the screen (issue 36), measured in headless Chromium at 1366 and 390 px: texts clear
of their controls' edges and of plotly's toolbar, tables within their width, and notes that describe the model
built and what comes next when the status does. Screenshots go to tests/screenshots/ for a person to look at.
"""

import pytest
from support.browser import assert_no_errors, open_tab, shot

pytestmark = pytest.mark.browser
JS_BOX = "e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"
# The box of an element's text (a Range over its contents), and its padding-right
JS_TEXT_BOX = "e => { const r = document.createRange(); r.selectNodeContents(e); const b = r.getBoundingClientRect(); " \
              "return [b.left, b.top, b.right, b.bottom]; }"


def box(locator) -> list[float]:
    return locator.evaluate(JS_BOX)


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def train_default_model(page) -> None:
    """Press Train on the default task; returns once its status says Done."""
    page.locator("#train-button").click()
    page.locator("#train-status", has_text="Done:").wait_for()


def analyse_a_probe(page) -> None:
    open_tab(page, "Attention")
    page.get_by_role("button", name="Induction probe").click()
    page.wait_for_function("() => document.querySelector('#attention-text textarea').value.length > 0")
    page.get_by_role("button", name="Analyse", exact=True).click()
    page.locator("#attention-grid .js-plotly-plot").wait_for()


def test_at_1366_the_train_tab_says_what_comes_next_and_describes_the_model_built(open_page):
    page = open_page(1366, 900)
    # The stage's long name ends (in an ellipsis) before the dropdown's arrow instead of running under it.
    stage = page.locator("#stage-dropdown input")
    text_end = stage.evaluate("e => e.getBoundingClientRect().right - parseFloat(getComputedStyle(e).paddingRight)")
    assert stage.evaluate("e => e.scrollWidth > e.clientWidth")  # the name is longer than the box: it needs this
    assert text_end <= box(page.locator("#stage-dropdown .icon-wrap"))[0]

    train_default_model(page)
    # What Train will do next is said with "Done", not seconds later
    assert "already trained" in page.locator("#train-next").inner_text()
    # The Compare runs' Layer slider: one-layer runs have no layer to choose (it offered 0-5)
    page.get_by_text("Compare runs", exact=True).click()
    page.locator("#compare-runs").wait_for()
    assert page.locator("#compare-layer").count() == 0 or not page.locator("#compare-layer").is_visible()
    # The default model cannot be exported: said beside the button before a click, the button disabled
    page.get_by_text("Checkpoint: download or upload").click()
    page.locator("#export-note", has_text="cannot be exported").wait_for()
    assert "lm_head_bias=True" in page.locator("#export-note").inner_text()
    assert page.locator("#export-button").is_disabled()
    shot(page, "screen-train-1366")

    # Llama's parts: the stage names RMSNorm, the position switch RoPE (no position table)
    page.get_by_text("Modern parts (Llama and its family)").click()
    page.get_by_text("RMSNorm (Llama)", exact=True).click()
    page.locator("#modern-position input").click()
    page.get_by_role("option", name="RoPE (Llama)").click()
    page.wait_for_function("() => document.querySelector('#stage-dropdown input').value.includes('RMSNorm')")
    page.locator("#switch-use_position_embedding", has_text="Positions: RoPE (Llama), no position table").wait_for()
    assert "LayerNorm" not in stage.input_value()

    # The figures with PNG and SVG buttons: plotly's toolbar (its dark logo) no longer shows under them
    analyse_a_probe(page)
    figures = page.locator(".figure-buttons:has(.js-plotly-plot)")
    assert figures.count() >= 2
    for figure in figures.all():
        figure.locator(".js-plotly-plot").hover()
        buttons = box(figure.locator(".icon-button-wrapper"))
        bars = [box(bar) for bar in figure.locator(".modebar").all() if bar.is_visible()]
        assert not any(overlap(bar, buttons) for bar in bars), (buttons, bars)
    shot(page, "screen-attention-1366")
    assert_no_errors(page)


def test_at_390_texts_stay_clear_of_edges_and_the_toolbar(open_page):
    page = open_page(390, 844)
    # "New model" keeps a margin inside its button (its text touched both edges)
    for button in page.locator("#train-buttons > button").all():
        left, _, right, _ = box(button)
        text_left, _, text_right, _ = button.evaluate(JS_TEXT_BOX)
        assert text_left - left >= 8 and right - text_right >= 8, (button.inner_text(), left, text_left, text_right, right)

    train_default_model(page)
    # The loss chart's toolbar, shown on hover or touch, covers neither the chart's label nor its legend
    plot = page.locator("#loss-plot")
    plot.locator(".js-plotly-plot").hover()
    bar = plot.locator(".modebar")
    bar.wait_for()
    covered = [box(plot.locator("[data-testid='block-label']"))] + [box(item) for item in plot.locator("g.traces").all()]
    assert len(covered) == 4  # the label, train, validation and the answers' legend entries
    assert not any(overlap(box(bar), other) for other in covered), (box(bar), covered)
    shot(page, "screen-train-390")

    # Patching's pairs fit the phone's width instead of being cut at its right edge
    open_tab(page, "Attention")
    page.get_by_text("Why this token: activation patching").click()
    pairs = page.locator("#patching-pairs table")
    pairs.wait_for()
    assert pairs.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth")
    assert box(pairs)[2] <= box(page.locator("#patching-section"))[2]
    shot(page, "screen-attention-390")
    assert_no_errors(page)
