"""Issue 14 in headless Chromium: the causal mask switched off on the default copy task, trained, the
attention replayed with the slider and played, the heads' scores over training drawn. Each flow runs at a
laptop's width, then the same page is narrowed to a phone's and looked at again. Screenshots at both widths
go to tests/screenshots/ (git-ignored) for a person to look at."""

import pytest

from support.app import FORM, api_client
from support.browser import SCREENSHOTS, assert_no_errors, open_tab, set_number, wait_until_fits

pytestmark = pytest.mark.browser
REPLAY = "Replay: training step"
PHONE = {"width": 390, "height": 844}


def test_no_mask_trains_and_its_attention_replays(open_page):  # noqa: F811
    page = open_page()
    page.locator("#param-count").filter(has_text="parameters").wait_for()
    page.locator("#switch-causal input").uncheck()
    set_number(page, "Steps", 40)
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text="Done: 40 steps").wait_for()
    page.locator("#movie-note").filter(has_text="Replay:").wait_for()
    assert "of at most 2 MiB" in page.locator("#movie-note").inner_text()
    # After the run, the replay shows the last snapshot; scrubbing back redraws an earlier one.
    page.locator("#movie-frame").filter(has_text="at step 40").wait_for()
    set_number(page, REPLAY, 1)
    page.locator("#movie-frame").filter(has_text="at step 1").wait_for()
    page.locator("#head-scores").filter(has_text="induction score").wait_for()
    page.locator("#movie-play").click()  # plays the snapshots one after another, then pauses at the end
    page.locator("#movie-play").filter(has_text="Pause").wait_for()
    page.locator("#movie-frame").filter(has_text="at step 40").wait_for()
    page.locator("#movie-play").filter(has_text="Play").wait_for()
    page.locator("#movie-step").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "breakit-no-mask-desktop.png"), full_page=True)
    page.set_viewport_size(PHONE)  # the same replay on a phone: the slider scrubs, the frame fits
    set_number(page, REPLAY, 1)  # step 1 always has a snapshot (a busy server skips some later ones)
    page.locator("#movie-frame").filter(has_text="at step 1").wait_for()
    wait_until_fits(page, "#movie-frame .main-svg", PHONE["width"])
    page.locator("#movie-step").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "breakit-no-mask-phone.png"), full_page=True)
    # Every note that describes the model says it has no mask, and why its scores are so good (issue 30).
    assert "Built without the causal mask." in page.locator("#train-progress").inner_text()
    open_tab(page, "Generate")
    page.locator("#generate-model-info").filter(has_text="built without the causal mask").wait_for()
    assert "expect garbage" in page.locator("#generate-model-info").inner_text()
    page.screenshot(path=str(SCREENSHOTS / "breakit-no-mask-generate-phone.png"))
    open_tab(page, "Attention")
    page.locator("#attention-text textarea").fill("qwhzbkad|qwhzbkad")
    page.locator("#attention-run").click()
    page.locator("#attention-status").get_by_text("17 tokens", exact=True).wait_for()
    page.locator("#steps-section").get_by_text("Inside one head: step by step", exact=True).click()
    page.locator("#steps-run").click()
    note = page.locator("#steps-note").filter(has_text="nothing hides the keys after the query")
    note.wait_for()
    assert "get -∞ (the mask)" not in note.inner_text()
    assert "+ mask" not in page.locator("#steps-table .xtick text").all_text_contents()
    page.locator("#steps-table").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "breakit-no-mask-steps-phone.png"), full_page=True)
    assert_no_errors(page)


def test_the_attention_movie_endpoint_over_http(running_app):

    client = api_client(running_app[1])  # one client: one session
    with pytest.raises(Exception, match="no attention movie yet"):
        client.predict(api_name="/attention_movie")
    client.predict(**{**FORM, "steps": 12, "eval_interval": 100, "causal": False}, api_name="/train")
    answer = client.predict(api_name="/attention_movie")
    assert answer["steps"][-1] == 12 and len(answer["frames"]) == len(answer["steps"])
    assert len(answer["frames"][0]["maps"][0]) == 2  # the tiny model's two heads


def test_two_runs_compare_side_by_side_and_the_movie_downloads(open_page):  # noqa: F811
    page = open_page()
    page.locator("#param-count").filter(has_text="parameters").wait_for()
    set_number(page, "Steps", 60)
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text="Done: 60 steps").wait_for()
    page.locator("#switch-scale_attention input").uncheck()
    page.locator("#new-model-button").click()
    page.locator("#train-status").filter(has_text="Done: 60 steps").wait_for()
    page.locator("#compare").get_by_text("Compare runs").first.click()  # open the accordion
    table = page.locator("#compare-table")
    table.filter(has_text="no √d scaling").wait_for()
    assert "Run 1" in table.inner_text() and "Run 2" in table.inner_text()
    page.locator("#compare-attention").filter(has_text="R2 H0").wait_for()  # a row of heads per run
    page.locator("#compare-loss").filter(has_text="Run 1: √d scaling").wait_for()
    page.locator("#compare-loss").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "compare-runs-desktop.png"), full_page=True)
    page.set_viewport_size(PHONE)  # on a phone the comparison stacks and fits the screen
    page.locator("#compare-loss").scroll_into_view_if_needed()
    wait_until_fits(page, "#compare-loss .main-svg", PHONE["width"])
    page.screenshot(path=str(SCREENSHOTS / "compare-runs-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1366, "height": 900})
    # Unticking a run redraws without it.
    page.locator("#compare-runs").get_by_text("Run 1").click()
    page.locator("#compare-table").filter(has_not_text="Run 1").wait_for()
    page.locator("#movie-gif-button").click()
    page.locator("#movie-gif").filter(has_text=".gif").wait_for()
    stem = page.locator("#movie-gif .stem")  # the name without ".gif": whole, not cut down to ".g" or "..."
    assert stem.inner_text() == "attention-movie-step60" and stem.evaluate("e => e.scrollWidth <= e.clientWidth")
    page.locator("#movie").screenshot(path=str(SCREENSHOTS / "movie-gif-desktop.png"))
    assert_no_errors(page)
