"""The Attention tab in headless Chromium, as a learner meets it: train the default task on the
Train tab, analyse the copy example, read the headline, the board and the table, at a laptop's
1366x900 and a phone's 390x844. Screenshots go to tests/screenshots/ for a person to look at.
"""

import re

import pytest
from core.presets import get_preset
from playground.figures.attention import SUMMARY_HEADERS
from support.attention_page import (FIGURES, STEPS, TRAINED_TIMEOUT_MS, analyse, analyse_example, assert_titles_clear,
                                    boxes, figures_drawn, overlaps, trained_page)
from support.browser import LAPTOP, PHONE, SCREENSHOTS, assert_no_errors, new_page, open_tab, set_number

pytestmark = pytest.mark.browser
LONG_TEXT = "zxqkxtpyegf|umfi" * 2  # the model's whole context: 32 tokens, the most tick labels
STANDOUT = re.compile(r"L(\d+) H(\d+) ([a-z-]+) \((\d\.\d\d)\)")


@pytest.fixture(scope="module")
def page(running_app, browser):
    """One learner's page with the default task trained, shared by the two widths."""
    page = trained_page(browser, running_app[1])
    yield page
    page.close()


def table_rows(page) -> dict[tuple[int, int], list[str]]:
    """Every row of the per-head table by (layer, head), scrolling its virtual list to the end."""
    accordion = page.get_by_text("Per-head table")
    if not page.locator("#attention-table").is_visible():
        accordion.click()
    page.locator("#attention-table [role=gridcell]").first.wait_for()
    viewport = page.locator("#attention-table .virtual-table-viewport")
    rows: dict[tuple[int, int], list[str]] = {}
    for _ in range(50):
        for cells in viewport.evaluate("""v => Array.from(v.querySelectorAll('[role=row][aria-rowindex]'))
                .map(r => Array.from(r.querySelectorAll('[role=gridcell]')).map(c => c.innerText.trim()))
                .filter(cells => cells.length && cells[0] !== '')"""):
            rows[int(cells[0]), int(cells[1])] = cells
        if viewport.evaluate("v => v.scrollTop + v.clientHeight >= v.scrollHeight - 1"):
            break
        viewport.evaluate("v => { v.scrollTop += v.clientHeight / 2 }")
        page.wait_for_function("() => true")  # let the list render the rows scrolled into view
    viewport.evaluate("v => { v.scrollTop = 0 }")
    return rows


def assert_headline_matches_table(status: str, rows: dict) -> list[tuple]:
    headline = next(line for line in status.splitlines() if line.startswith("Heads to look at first"))
    standouts = STANDOUT.findall(headline)
    assert standouts, headline
    label_column, score_column = SUMMARY_HEADERS.index("label"), SUMMARY_HEADERS.index("score")
    for layer, head, label, score in standouts:  # the label, and after it the head's effect where it is large
        cells = rows[int(layer), int(head)]
        assert [cells[label_column].split(" · ")[0], cells[score_column]] == [label, score], (layer, head)
    assert not [key for key, cells in rows.items() if key[0] == 0 and cells[label_column].startswith("induction")]
    # the copying head looks 8 back from layer 0: by position, so not an induction head
    assert (standouts[0][0], standouts[0][2]) == ("0", "fixed-offset")
    return standouts


def assert_table_reads(page, *, all_columns_visible: bool) -> None:
    """Headers on one line each; the explanation column (or, on a laptop, every column) in view."""
    headers = page.locator("#attention-table th span.header")
    lines = headers.evaluate_all("spans => spans.map(s => [s.innerText, s.getClientRects().length])")
    assert lines and all(count == 1 for _, count in lines), lines
    box = page.locator("#attention-table .virtual-table-viewport").bounding_box()
    right = box["x"] + box["width"] + 1
    if all_columns_visible:
        last = page.locator("#attention-table th").last.bounding_box()
        assert last["x"] + last["width"] <= right, (last, box)
    else:  # a phone scrolls the table sideways to the explanation, which then fits whole
        explanation = page.locator("#attention-table th", has_text="what it does")
        explanation.evaluate("th => th.scrollIntoView({inline: 'start', block: 'nearest'})")
        column = explanation.bounding_box()
        assert box["x"] - 1 <= column["x"] and column["x"] + column["width"] <= right, (column, box)


def assert_figures_read(page) -> None:
    """No tick label on another; each title clear of the plotly toolbar and Gradio's block label."""
    for figure in ("attention-grid", "attention-large"):
        for axis in ("x", "y"):  # a subplot's tick groups are classed xtick, x2tick, ...
            ticks = boxes(page, f'#{figure} g[class^="{axis}"][class$="tick"] text')
            clashes = overlaps(ticks)
            assert ticks and not clashes, (figure, axis, clashes[:3])
    assert_titles_clear(page, FIGURES, (".modebar", "[data-testid=block-label]"))


def shoot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    page.locator("#attention-table").screenshot(path=str(SCREENSHOTS / f"{name}-table.png"))


def test_attention_at_laptop_width_labels_heads_one_way(page):
    status = analyse_example(page)
    assert "No induction head" in status  # the copy task is solved by position: the probe finds none
    standouts = assert_headline_matches_table(status, table_rows(page))
    layer, head, _, score = standouts[0]
    assert page.locator("#attention-summary").get_by_text(score).count() >= 1  # the board shows it too
    shape = get_preset("repeat").model  # the default model: one heatmap per layer x head
    assert page.locator("#attention-grid .heatmaplayer").count() == shape["n_layer"] * shape["n_head"]
    assert page.locator("#attention-view .legendtext").count() == shape["n_head"]  # one entry per head
    assert_table_reads(page, all_columns_visible=True)
    assert_figures_read(page)
    assert_no_errors(page)
    shoot(page, "attention-1366x900")


def test_attention_at_phone_width_labels_heads_one_way(page):
    page.set_viewport_size(PHONE)
    open_tab(page, "Train")  # then back through the phone's "More tabs" menu
    status = analyse_example(page)
    assert_headline_matches_table(status, table_rows(page))
    assert_table_reads(page, all_columns_visible=False)
    assert_figures_read(page)
    assert_no_errors(page)
    shoot(page, "attention-390x844")
    analyse(page, LONG_TEXT, 32)  # the narrowest heatmaps with the most tokens
    figures_drawn(page)
    assert_figures_read(page)
    page.screenshot(path=str(SCREENSHOTS / "attention-390x844-32-tokens.png"), full_page=True)

    # an out-of-vocabulary text shows the server's message, not a crash
    page.locator("#attention-text textarea").fill("HELLO")
    page.locator("#attention-run").click()
    page.get_by_text("not in this model's vocabulary").first.wait_for()


def test_the_replay_note_and_the_attention_tab_agree_on_the_copy_task(page):
    """The copy task's 8-back head sits in layer 0 and fails the probe: neither the replay note under the
    Train tab's movie nor the Attention tab calls any head an induction head, at either width."""
    for name, viewport in (("1366x900", LAPTOP), ("390x844", PHONE)):
        page.set_viewport_size(viewport)
        open_tab(page, "Train")
        note = page.locator("#movie-note")
        note.filter(has_text=f"No induction head at step {STEPS}").wait_for()
        assert not re.search(r"induction L\d", note.inner_text())
        note.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"replay-note-copy-task-{name}.png"), full_page=True)
        status = analyse_example(page)
        assert "No induction head: no head past layer 0" in status
        assert " induction (" not in status  # no head labelled induction among those to look at first
        assert_no_errors(page)
        page.screenshot(path=str(SCREENSHOTS / f"attention-copy-task-{name}.png"), full_page=True)


def test_the_induction_probe_fits_induction_ropes_context(running_app, browser):
    """induction-rope's model reads 40 tokens (RoPE could read more, but not as trained): at both widths the
    probe writes at most 40, and the analysis has no 'past its training length' warning."""
    page = new_page(browser, running_app[1] + "?preset=induction-rope&steps=5", **LAPTOP)
    page.set_default_timeout(TRAINED_TIMEOUT_MS)
    page.locator("#param-count").filter(has_text="parameters").filter(has_not_text="position embedding").wait_for()
    set_number(page, "Steps", 5)  # the probe's length depends on the model's context, not its training
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text="Done: 5 steps").wait_for()
    for name, viewport in (("1366x900", None), ("390x844", PHONE)):
        if viewport:
            page.set_viewport_size(viewport)
            open_tab(page, "Train")
        open_tab(page, "Attention")
        for _ in range(3):  # random lengths: each must fit
            before = page.locator("#attention-text textarea").input_value()
            page.get_by_role("button", name="Induction probe").click()
            text = page.locator("#attention-text textarea")
            page.wait_for_function("(b) => document.querySelector('#attention-text textarea').value !== b", arg=before)
            n_tokens = len(text.input_value())  # one character, one token
            assert 6 <= n_tokens <= 40
            analyse(page, text.input_value(), n_tokens)
            status = figures_drawn(page)
            assert "Past its training length" not in status
        assert_no_errors(page)
        page.screenshot(path=str(SCREENSHOTS / f"attention-probe-induction-rope-{name}.png"), full_page=True)
    page.close()
