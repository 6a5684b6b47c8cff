"""Coming back in headless Chromium (issue 24): train the default task, stop the server, start it again
on the same store and port, reload the tab: the status welcomes the learner back, the loss curve, the
form, the runs kept to compare and the attention movie are as they were, Train goes on from there, and
Generate reads the model. At a laptop's width, then a phone's.
Screenshots go to tests/screenshots/ for a person to look at."""

import pytest
from playwright.sync_api import Error as PlaywrightError
from support.app import free_port, serve
from support.browser import SCREENSHOTS, assert_no_errors, new_page, open_tab, set_number

from playground.settings import Settings
from playground.tabs.train.restore import UNREADABLE

pytestmark = pytest.mark.browser
STEPS = 120


def reload_after_restart(page) -> None:
    """Reload a page whose server restarted: the page may be reloading itself as its connection comes back,
    and then that load is the reload (Chromium aborts ours: net::ERR_ABORTED, once in CI; or ours finds the page
    mid-swap: "Not attached to an active page", once beside other tests' work)."""
    try:
        page.reload(wait_until="domcontentloaded")
    except PlaywrightError as error:
        if "ERR_ABORTED" not in str(error) and "Not attached to an active page" not in str(error):
            raise
        page.wait_for_load_state("domcontentloaded")


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
        reload_after_restart(page)
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


def test_a_code_carries_the_model_to_the_same_store_at_another_address(browser, tmp_path):
    """Browser storage is per address: on another port the model would be stranded. The code made on
    the first page takes it to a page of the second server, which keeps it across a reload."""
    settings = Settings.from_env({}, state_dir=str(tmp_path / "store"))
    with serve(settings) as (_, first_url), serve(settings) as (_, other_url):
        assert first_url != other_url
        page = new_page(browser, first_url)
        set_number(page, "Steps", STEPS)
        page.locator("#train-button").click()
        page.locator("#train-status").filter(has_text=f"Done: {STEPS} steps").wait_for()
        page.locator("#carry").get_by_text("Continue in another browser").first.click()
        page.locator("#carry-make").click()
        code_box = page.locator("#carry-code textarea, #carry-code input").first
        code_box.wait_for()
        page.wait_for_function("el => el.value.length === 19", arg=code_box.element_handle())
        code = code_box.input_value()
        assert "treat it as a password" in page.locator("#carry-code").inner_text()
        page.locator("#carry").scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / "carry-1-code-1366.png"), full_page=True)

        phone = new_page(browser, other_url, width=390, height=844)  # another browser, another address
        phone.locator("#carry").get_by_text("Continue in another browser").first.click()
        phone.locator("#carry-input textarea, #carry-input input").first.fill(code)
        phone.locator("#carry-take").click()
        phone.locator("#train-status").filter(has_text=f"from the other browser is here, at step {STEPS}").wait_for()
        phone.locator("#train-next").filter(has_text=f"already trained {STEPS} of {STEPS} steps").wait_for()
        phone.locator("#loss-plot .scatterlayer .trace").first.wait_for()
        phone.screenshot(path=str(SCREENSHOTS / "carry-2-taken-390.png"), full_page=True)
        phone.reload(wait_until="domcontentloaded")  # this browser keeps the model's token now
        phone.locator("#train-status").filter(has_text=f"Welcome back: your model is here as you left it, at step {STEPS}").wait_for()
        open_tab(phone, "Generate")
        phone.locator("#generate-model-info").filter(has_text=f"{STEPS} steps").wait_for()
        assert_no_errors(page)
        assert_no_errors(phone)
        page.close()
        phone.close()


def test_with_a_store_that_cannot_be_written_a_reloaded_tab_gets_its_model_back_from_memory(browser, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # the store cannot be made: models in memory only
    with serve(Settings.from_env({}, state_dir=str(blocker / "store"))) as (demo, url):
        page = new_page(browser, url)
        page.locator("#train-status").filter(has_text="in memory only").wait_for()
        set_number(page, "Steps", STEPS)
        page.locator("#train-button").click()
        page.locator("#train-status").filter(has_text=f"Done: {STEPS} steps").wait_for()
        lines = loss_points(page)
        page.reload(wait_until="domcontentloaded")
        page.locator("#train-status").filter(has_text="Welcome back").wait_for()
        status = page.locator("#train-status").inner_text()
        assert f"step {STEPS}" in status and "a restart of the server loses it" in status
        page.locator("#loss-plot .scatterlayer .trace").first.wait_for()
        assert loss_points(page) == lines  # the same curves
        page.locator("#train-next").filter(has_text=f"already trained {STEPS} of {STEPS} steps").wait_for()
        page.locator("#movie-note").filter(has_text="Replay:").wait_for()  # its movie came along
        page.screenshot(path=str(SCREENSHOTS / "restore-4-memory-only-reload-1366.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=str(SCREENSHOTS / "restore-5-memory-only-reload-390.png"), full_page=True)
        assert demo.registry.counts()["models"] == 1  # handed over, not copied
        assert_no_errors(page)
        page.close()


def test_a_replaced_secret_starts_the_reloaded_tab_afresh_with_a_note(browser, tmp_path):
    """The store's browser-secret damaged while the server was down: the browser cannot read its token with
    the replacement, so the tab starts afresh, and says so instead of silently losing the model."""
    settings = Settings.from_env({}, state_dir=str(tmp_path / "store"))
    port = free_port()
    with serve(settings, port=port) as (demo, url):
        page = new_page(browser, url)
        set_number(page, "Steps", 30)
        page.locator("#train-button").click()
        page.locator("#train-status").filter(has_text="Done: 30 steps").wait_for()
        assert demo.store.writer.flush()
    (tmp_path / "store" / "browser-secret").write_text("damaged by hand")
    with serve(settings, port=port) as (demo, url):
        reload_after_restart(page)
        page.locator("#train-status").filter(has_text=UNREADABLE).wait_for()
        assert "Welcome back" not in page.locator("#train-status").inner_text()
        page.screenshot(path=str(SCREENSHOTS / "restore-6-replaced-secret-1366.png"), full_page=True)
        page.reload(wait_until="domcontentloaded")  # the fresh token is readable again: no note the next time
        page.locator("#train-next").wait_for()
        page.locator("#train-status").filter(has_text="Press").wait_for()
        assert UNREADABLE not in page.locator("#train-status").inner_text()
        assert_no_errors(page)
        page.close()
