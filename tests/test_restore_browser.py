"""Coming back in headless Chromium (issue 24): train the default task, stop the server, start it again
on the same store and port, reload the tab: the status welcomes the learner back, the loss curve, the
form, the runs kept to compare and the attention movie are as they were, Train goes on from there, and
Generate reads the model. At a laptop's width, then a phone's.
Screenshots go to tests/screenshots/ for a person to look at."""

import pytest
from conftest import SCREENSHOTS, free_port, serve
from test_browser import assert_no_errors, open_tab, set_number
from test_train_browser import new_page

from playground.settings import Settings

pytestmark = pytest.mark.browser
STEPS = 120


def loss_points(page) -> int:
    """Points drawn on the loss chart (every trace)."""
    return page.locator("#loss-plot .scatterlayer .trace path.js-line").count()


def test_a_restarted_server_gives_the_reloaded_tab_its_model_back(browser, tmp_path):
    settings = Settings.from_env({}, state_dir=str(tmp_path / "store"))
    port = free_port()  # the same address after the restart: the browser keeps its token per site
    with serve(settings, port=port) as (demo, url):
        page = new_page(browser, url)
        set_number(page, "Steps", STEPS)
        page.get_by_label("Seed", exact=True).fill("7")
        page.locator("#train-button").click()
        page.locator("#train-status").filter(has_text=f"Done: {STEPS} steps").wait_for()
        assert demo.store.writer.flush()
        lines = loss_points(page)
        sample = page.locator("#live-sample textarea").input_value()
        page.screenshot(path=str(SCREENSHOTS / "restore-1-before-restart.png"), full_page=True)
    assert lines > 0 and sample

    with serve(settings, port=port) as (demo, url):
        page.reload(wait_until="domcontentloaded")
        page.locator("#train-status").filter(has_text="Welcome back").wait_for()
        assert f"step {STEPS}" in page.locator("#train-status").inner_text()
        page.locator("#loss-plot .scatterlayer .trace").first.wait_for()
        assert loss_points(page) == lines  # the same curves
        assert page.get_by_label("Seed", exact=True).input_value() == "7"  # the form as it was
        assert page.locator("#live-sample textarea").input_value() == sample  # the live sample too (it was empty)
        page.locator("#train-next").filter(has_text=f"already trained {STEPS} of {STEPS} steps").wait_for()
        assert "(loaded)" in page.locator("#train-progress").inner_text()
        page.locator("#compare").get_by_text("Compare runs").first.click()  # the run kept to compare is back too
        page.locator("#compare-table").filter(has_text="Run 1").wait_for()
        page.locator("#compare-loss").filter(has_text="Run 1").wait_for()
        # ... and the attention movie, replayed from its last snapshot
        page.locator("#movie-note").filter(has_text="Replay:").wait_for()
        page.locator("#movie-frame").filter(has_text=f"at step {STEPS}").wait_for()
        assert page.locator("#movie-step input[type=number]").input_value() == str(STEPS)
        page.locator("#live-attention").filter(has_text="weight").wait_for()  # the live map as the run left it
        page.screenshot(path=str(SCREENSHOTS / "restore-2-after-restart-1366.png"), full_page=True)
        set_number(page, "Steps", STEPS + 30)  # and Train goes on from there
        page.locator("#train-next").filter(has_text=f"continues your model from step {STEPS}").wait_for()
        page.locator("#train-button").click()
        page.locator("#train-status").filter(has_text=f"Done: {STEPS + 30} steps").wait_for()
        open_tab(page, "Generate")
        page.locator("#generate-model-info").filter(has_text=f"{STEPS + 30} steps").wait_for()
        page.set_viewport_size({"width": 390, "height": 844})
        open_tab(page, "Train")
        page.screenshot(path=str(SCREENSHOTS / "restore-3-after-restart-390.png"), full_page=True)
        assert_no_errors(page)
        page.close()
