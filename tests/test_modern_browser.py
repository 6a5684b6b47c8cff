"""Today's parts in headless Chromium (issue 22): on the default copy task, open Modern parts, pick rotary
positions and key/value heads shared in pairs, train, and see the attention and its movie. Screenshots at
both widths go to tests/screenshots/ for a person to look at."""

import pytest

from support.browser import SCREENSHOTS, assert_no_errors, open_tab, set_number

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width, height, name", [(1366, 900, "desktop"), (390, 844, "phone")])
def test_rope_and_grouped_queries_train_from_the_modern_parts(open_page, width, height, name):  # noqa: F811
    page = open_page(width, height)
    count = page.locator("#param-count").filter(has_text="position embedding")
    count.wait_for()  # the default model learns its positions in a table
    page.locator("#modern-parts").get_by_text("Modern parts").click()
    page.get_by_label("Positions").click()
    page.get_by_role("option", name="RoPE (Llama)", exact=True).click()
    page.locator("#param-count").filter(has_text="parameters").filter(has_not_text="position embedding").wait_for()
    page.locator("#modern-kv-heads input").fill("2")
    page.locator("#modern-kv-heads input").press("Enter")
    set_number(page, "Steps", 40)
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text="Done: 40 steps").wait_for()
    page.locator("#live-attention .js-plotly-plot").wait_for()
    page.locator("#movie-note").filter(has_text="Replay:").wait_for()
    page.locator("#modern-position").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / f"modern-rope-{name}.png"), full_page=True)
    assert_no_errors(page)


def test_the_llama_style_preset_trains_and_its_steps_show_ropes_turn(open_page):  # noqa: F811
    """Trained once at a laptop's width, then the same page (its model, its analysis) on a phone's."""
    page = open_page(1366, 900, "?preset=llama-style&steps=30")  # the preset, as a teacher's link gives it
    page.locator("#param-count").filter(has_text="RMSNorms").filter(has_not_text="position embedding").wait_for()
    set_number(page, "Steps", 30)
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text="Done: 30 steps").wait_for()
    for name, viewport in (("desktop", None), ("phone", {"width": 390, "height": 844})):
        if viewport:
            page.set_viewport_size(viewport)
            open_tab(page, "Train")
        page.locator("#live-attention .js-plotly-plot").wait_for()
        page.locator("#movie-note").filter(has_text="Replay:").wait_for()
        page.screenshot(path=str(SCREENSHOTS / f"modern-llama-style-train-{name}.png"), full_page=True)

        open_tab(page, "Attention")
        if not viewport:  # analysed once; the phone shows the same figures
            page.locator("#attention-text textarea").fill("ROMEO:\nBut soft, what light through yonder window breaks?")
            page.locator("#attention-run").click()
            page.locator("#attention-status").get_by_text("tokens", exact=False).first.wait_for()
            page.locator("#steps-section").get_by_text("Inside one head: step by step", exact=True).click()
            page.locator("#steps-run").click()
        page.locator("#steps-note").get_by_text("Rotary positions (RoPE)").wait_for()
        page.locator("#steps-vectors .main-svg").first.wait_for()
        assert page.locator("#steps-vectors").get_by_text("before RoPE").count() >= 1
        page.locator("#steps-section").scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"modern-llama-style-steps-{name}.png"), full_page=True)
    assert_no_errors(page)
