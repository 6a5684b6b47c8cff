"""Inside a head, in headless Chromium: train the default task, analyse the copy example, then open
each tool below the heatmaps (step by step, knock-outs, the logit lens, logit attribution, patching, a
head's circuits, the export) and run it, at a laptop's 1366x900 and a phone's 390x844. Screenshots go to tests/screenshots/ for a person to look at.
"""

import json
from pathlib import Path

import pytest
from support.attention_page import analyse, analyse_example, assert_titles_clear, boxes, trained_page
from support.browser import PHONE, SCREENSHOTS, assert_no_errors, open_tab

from playground.tabs.attention.export import EXPORT_NAMES

pytestmark = pytest.mark.browser
SECTIONS = {"steps": "Inside one head: step by step", "knockout": "Knock out heads", "lens": "Logit lens",
            "attribution": "Why this token: logit attribution", "patching": "Why this token: activation patching",
            "circuits": "A head's circuits: QK and OV", "export": "Export"}
# Each "why" tool: the sentence its note says once it has run, and its figures.
WHY = {"attribution": ("All shares add up to the difference", ("attribution-heads", "attribution-parts")),
       "patching": ("brings back the most", ("patching-residual", "patching-heads")),
       "circuits": ("copying score", ("circuits-qk", "circuits-positional", "circuits-ov"))}
TOOL_FIGURES = ("steps-table", "steps-vectors", "knockout-importance", "lens-plot",
                *(figure for _, figures in WHY.values() for figure in figures))


@pytest.fixture(scope="module")
def page(running_app, browser):
    """One learner's page with the default task trained and the copy example analysed."""
    page = trained_page(browser, running_app[1], accept_downloads=True)
    analyse_example(page)
    yield page
    page.close()


def open_section(page, name: str) -> None:
    """Open a tool's accordion (once) and bring it into view."""
    section = page.locator(f"#{name}-section")
    if not page.locator(f"#{name}-run").is_visible():
        section.get_by_text(SECTIONS[name], exact=True).click()
    page.locator(f"#{name}-run").scroll_into_view_if_needed()


def pick_query(page, name: str) -> None:
    """Choose the query token in the picker above the large heatmaps."""
    page.get_by_label("Query token (head view)").click()
    page.get_by_role("option", name=name, exact=True).click()


def run_tools(page) -> None:
    """Every tool once, as a learner would: the steps with both toggles, a knock-out, the lens."""
    open_section(page, "steps")
    for toggle in ("#steps-no-scale", "#steps-no-mask"):
        if not page.locator(f"{toggle} input").is_checked():
            page.locator(f"{toggle} input").check()
    page.locator("#steps-run").click()
    page.locator("#steps-note").get_by_text("Without the mask").wait_for()
    for figure in ("steps-table", "steps-vectors"):
        page.locator(f"#{figure} .main-svg").first.wait_for()

    open_section(page, "knockout")
    if not page.locator("#knockout-heads").get_by_text("L0 H0").count():  # kept from a run before
        page.locator("#knockout-heads input").click()
        page.get_by_role("option", name="L0 H0").click()
        page.get_by_role("option", name="L0 H1").click()
        page.keyboard.press("Escape")
    page.locator("#knockout-run").click()
    page.locator("#knockout-note").get_by_text("the loss on the analysed text").wait_for()
    page.locator("#knockout-importance .main-svg").first.wait_for()

    open_section(page, "lens")
    page.locator("#lens-run").click()
    page.locator("#lens-note").get_by_text("really comes next").wait_for()
    page.locator("#lens-plot .main-svg").first.wait_for()

    for name, (sentence, figures) in WHY.items():  # the copy pair is the patching boxes' default
        open_section(page, name)
        page.locator(f"#{name}-run").click()
        page.locator(f"#{name}-note").get_by_text(sentence).wait_for()
        for figure in figures:
            page.locator(f"#{figure} .main-svg").first.wait_for()


def shoot_sections(page, width: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"inside-{width}.png"), full_page=True)
    for name in SECTIONS:
        page.locator(f"#{name}-section").screenshot(path=str(SCREENSHOTS / f"inside-{width}-{name}.png"))


def test_every_tool_runs_and_exports_at_laptop_width(page):
    pick_query(page, "#12 z")  # an early query: the mask has later tokens to hide
    run_tools(page)
    assert "on later tokens (#13 to #16)" in page.locator("#steps-note").inner_text()
    assert "−∞" in page.locator("#steps-table .heatmap-label").all_text_contents()  # the masked keys
    shoot_sections(page, "1366x900")  # before the checks: a failure is easier to see
    note = page.locator("#knockout-note").inner_text()
    assert "L0 H0, L0 H1" in note and "→" not in note
    assert page.locator("#knockout-intact textarea").input_value()  # the continuations were written
    assert page.locator("#knockout-knocked textarea").input_value()
    # the steps table has a softmax column, and the toggles added their two
    headers = page.locator("#steps-table .xtick text").all_text_contents()
    assert headers[:4] == ["q·k", "÷√16", "+ mask", "softmax"] and len(headers) == 6, headers
    assert_titles_clear(page, TOOL_FIGURES, ("[data-testid=block-label]", "button"))

    # a figure downloads as SVG and as PNG from its buttons, named by the app
    for fmt, start in (("svg", b"<svg"), ("png", b"\x89PNG")):
        with page.expect_download() as download:
            page.locator("#steps-table").get_by_role("button", name=fmt.upper(), exact=True).click()
        assert download.value.suggested_filename == f"steps-table.{fmt}"
        assert Path(download.value.path()).read_bytes().startswith(start), fmt

    open_section(page, "export")
    page.locator("#export-run").click()
    links = page.locator("#export-files a")
    links.nth(2).wait_for()
    names = links.evaluate_all("links => links.map(a => a.download)")
    assert sorted(names) == sorted(EXPORT_NAMES.values()), names
    with page.expect_download() as download:
        links.nth(names.index(EXPORT_NAMES["json"])).click()
    document = json.loads(Path(download.value.path()).read_text())
    assert document["text"] == "qwhzbkad|qwhzbkad"
    assert {"head_steps", "knock_out", "importance", "logit_lens", "logit_attribution", "patching",
            "circuits"} <= set(document)
    assert_no_errors(page)


def test_every_tool_reads_at_phone_width(page):
    page.set_viewport_size(PHONE)
    open_tab(page, "Train")  # then back through the phone's "More tabs" menu
    analyse_example(page)  # figures drawn at this width; the tools start afresh
    assert page.locator("#knockout-heads").get_by_text("L0 H0").count() == 0
    run_tools(page)
    pick_query(page, "#10 w")  # the steps, once shown, follow the pickers
    page.locator("#steps-table .gtitle").filter(has_text="query #10 w").wait_for()
    shoot_sections(page, "390x844")
    assert_titles_clear(page, TOOL_FIGURES, ("[data-testid=block-label]", "button"))
    for figure in TOOL_FIGURES:  # nothing wider than the screen, no title cut off
        box = page.locator(f"#{figure}").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 1, (figure, box)
        drawn = page.locator(f"#{figure} .main-svg").first.bounding_box()
        for title in boxes(page, f"#{figure} .gtitle, #{figure} .gtitle-subtitle"):
            assert title["left"] >= drawn["x"] and title["right"] <= drawn["x"] + drawn["width"] + 1, (
                figure, title, drawn)
    assert_no_errors(page)


def test_patching_a_pair_whose_answers_barely_differ_draws_no_shares(page):
    """The copy pair's corrupted text changed where the answer does not depend on it (the h, not the f): the
    answers move by thousandths of a logit; the note says so and the shares of the copy pair before it go."""
    for width, viewport in (("1366x900", {"width": 1366, "height": 900}), ("390x844", PHONE)):
        page.set_viewport_size(viewport)
        open_tab(page, "Train")
        open_tab(page, "Attention")
        open_section(page, "patching")
        page.locator("#patching-clean textarea").fill("\nabcdefgh|abcde")
        page.locator("#patching-corrupted textarea").fill("\nabcdeqgh|abcde")
        page.locator("#patching-run").click()
        page.locator("#patching-note").get_by_text("brings back the most").wait_for()
        page.locator("#patching-heads .main-svg").first.wait_for()
        page.locator("#patching-corrupted textarea").fill("\nabcdefgz|abcde")
        page.locator("#patching-run").click()
        page.locator("#patching-note").get_by_text("The corruption moves the answer by only").wait_for()
        assert "so none is drawn" in page.locator("#patching-note").inner_text()
        for figure in ("patching-residual", "patching-heads"):
            assert page.locator(f"#{figure} .main-svg").count() == 0, figure
        assert_no_errors(page)
        page.locator("#patching-section").screenshot(path=str(SCREENSHOTS / f"inside-{width}-patching-tiny-gap.png"))


def test_patching_the_analysed_text_shows_each_heads_effect_beside_its_label(page):
    """Analysed, the note under the heads' summary reads effects by direct attribution; the analysed text patched
    (the copy pair's clean text), by patching: the note says which, and that labels read patterns."""
    for width, viewport in (("1366x900", {"width": 1366, "height": 900}), ("390x844", PHONE)):
        page.set_viewport_size(viewport)
        open_tab(page, "Train")
        open_tab(page, "Attention")
        analyse(page, "\nabcdefgh|abcd", 14)  # another text first, so the note below cannot be a stale one
        analyse(page, "\nabcdefgh|abcde", 15)
        note = page.locator("#attention-summary-note")
        note.get_by_text("Labels read patterns, effects read causes").wait_for()
        assert "direct logit attribution" in note.inner_text()
        open_section(page, "patching")
        page.locator("#patching-clean textarea").fill("\nabcdefgh|abcde")
        page.locator("#patching-corrupted textarea").fill("\nabcdeqgh|abcde")
        page.locator("#patching-run").click()
        note.get_by_text("activation patching").wait_for()
        assert "Largest: L" in note.inner_text()  # the trained copy head carries the answer
        page.locator("#attention-summary .main-svg").first.wait_for()
        assert_no_errors(page)
        page.locator("#attention-summary").scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"inside-{width}-effects.png"), full_page=True)
        page.locator("#attention-summary").screenshot(path=str(SCREENSHOTS / f"inside-{width}-effects-board.png"))
        note.screenshot(path=str(SCREENSHOTS / f"inside-{width}-effects-note.png"))
