"""A new user's walk through every tab in headless Chromium: train the default task, generate and
inspect a token, analyse attention, train the baby GPT. Screenshots go to tests/screenshots/
(git-ignored) for a person to look at; the test fails if any tab shows an error.
"""

import re
import time

import pytest

from support.browser import TIMEOUT_MS, assert_no_errors, open_tab, set_number, shot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(running_app, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    # Gradio's heartbeat keeps "networkidle" from ever firing: wait for the page, then an element.
    page.goto(running_app[1], wait_until="domcontentloaded")
    page.locator("#train-button").wait_for()
    yield page
    page.close()


def test_train_tab_trains_the_default_task_with_live_charts(page):
    open_tab(page, "Train")
    page.locator("#param-count").filter(has_text="parameters").wait_for()
    shot(page, "1-train-start")
    set_number(page, "Steps", 200)  # the default recipe, shortened for the test
    charts = ("#loss-plot .js-plotly-plot", "#live-attention .js-plotly-plot", "#head-scores .js-plotly-plot")
    for chart in charts:  # drawn before training (placeholders): marked, to see that training redraws the same ones
        page.locator(chart).evaluate("chart => { chart.dataset.before = 'training'; }")
    page.locator("#train-button").click()
    page.locator("#train-progress").filter(has_text="tokens/s").wait_for()
    page.locator("#loss-plot .js-plotly-plot").wait_for()
    page.locator("#train-status").filter(has_text="Done: 200 steps").wait_for()
    page.locator("#train-progress").filter(has_text="% right").wait_for()  # the copied half, scored
    page.locator("#live-attention .js-plotly-plot").wait_for()
    assert page.locator("#loss-plot .scatterlayer .trace").count() == 3  # train, validation, and the answers
    for chart in charts:  # redrawn in place (LivePlot), not a new chart mounted for each update as gr.Plot does
        assert page.locator(chart).evaluate("chart => chart.dataset.before") == "training", chart
    assert page.locator("#live-sample textarea").input_value() != ""
    shot(page, "2-train-done")
    assert_no_errors(page)


def test_generate_tab_streams_and_inspects_a_token(page):
    open_tab(page, "Generate")
    page.locator("#generate-model-info").filter(has_text="trained 200 steps").wait_for()
    page.locator("#prompt textarea").fill("abc")
    page.locator("#generate-button").click()
    page.locator("#generate-status").filter(has_text="tokens.").wait_for()
    # the copy task's model writes its lines after a line break, and the tab puts one before the prompt
    assert page.locator("#generated-text textarea").input_value().startswith("\nabc")
    page.locator("#generated-tokens .token").nth(3).click()  # a generated token
    page.locator("#token-alternatives .js-plotly-plot .bars").wait_for()
    shot(page, "3-generate")
    assert_no_errors(page)


def test_attention_tab_shows_every_head(page):
    open_tab(page, "Attention")
    page.locator("#attention-text textarea").fill("qwhzbkad|qwhzbkad")
    page.locator("#attention-run").click()
    page.locator("#attention-grid .js-plotly-plot").wait_for()
    page.locator("#attention-grid .js-plotly-plot .hm, #attention-grid .js-plotly-plot image").first.wait_for()
    shot(page, "4-attention")
    assert_no_errors(page)


def test_baby_gpt_tab_trains_its_markov_chain(page):
    open_tab(page, "Baby GPT")
    page.locator("#baby-train").click()
    page.locator("#baby-chain .js-plotly-plot").wait_for()
    page.locator("#baby-status").filter(has_text=re.compile(r"\d")).wait_for()
    page.wait_for_timeout(1500)  # let the last streamed update land
    shot(page, "5-baby-gpt")
    assert_no_errors(page)


def test_bad_input_shows_a_clear_message_not_a_crash(page):
    open_tab(page, "Generate")
    page.locator("#prompt textarea").fill("ABC")  # capitals are not in the copy task's vocabulary
    page.locator("#generate-button").click()
    toast = page.locator(".toast-body").filter(has_text="not in this model's vocabulary")
    toast.wait_for()
    shot(page, "6-error-message")


def test_closing_a_tab_frees_its_session(running_app, browser):
    demo, url = running_app
    before = demo.registry.keys()  # (other tests' closed pages may still be leaving meanwhile)
    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url, wait_until="domcontentloaded")
    open_tab(page, "Generate")
    page.locator("#generate-button").click()  # no model yet: an error, but the session exists
    page.locator(".toast-body").filter(has_text="no model yet").wait_for()
    new = demo.registry.keys() - before
    assert len(new) == 1
    (key,) = new
    assert demo.registry.peek(key).browser  # the page's load event said a browser holds it: the long time-to-live
    page.close()  # demo.unload frees the session
    deadline = time.monotonic() + 30
    while key in demo.registry.keys() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert key not in demo.registry.keys()
