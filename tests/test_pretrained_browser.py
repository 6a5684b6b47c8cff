"""GPT-2 on the Attention tab in headless Chromium: pick it, analyse a text, see every head; the
Generate tab's picker follows. The GPT-2 is a tiny random one in a temporary folder (offline).
Screenshots go to tests/screenshots/ for a person to look at.
"""

import pytest
from conftest import SCREENSHOTS, serve
from test_browser import assert_no_errors, open_tab
from test_pretrained_app import TEXT, tiny_gpt2_folder  # noqa: F401 (a fixture)
from test_train_browser import new_page

from playground.settings import Settings

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def gpt2_url(tiny_gpt2_folder):  # noqa: F811
    with serve(Settings.from_env({}, gpt2_weights=tiny_gpt2_folder)) as (_, url):
        yield url


def test_pick_gpt2_on_the_attention_tab_and_see_its_heads(browser, gpt2_url):
    page = new_page(browser, gpt2_url)
    try:
        open_tab(page, "Attention")
        page.locator("#attention-model-choice").get_by_label("GPT-2 (pretrained)").check()
        page.locator("#attention-model-note").filter(has_text="GPT-2 is read-only here").wait_for()
        page.locator("#attention-text textarea").fill(TEXT)
        page.locator("#attention-run").click()
        page.locator("#attention-status").filter(has_text="2 layer(s) x 4 head(s)").wait_for()
        page.locator("#attention-grid .js-plotly-plot").wait_for()
        assert page.locator("#attention-grid .heatmaplayer .hm").count() == 8  # every layer x head
        page.screenshot(path=str(SCREENSHOTS / "pretrained-attention.png"), full_page=True)
        open_tab(page, "Generate")  # the other tab reads GPT-2 too, and says so
        assert page.locator("#generate-model-choice").get_by_label("GPT-2 (pretrained)").is_checked()
        page.locator("#generate-model-info").filter(has_text="GPT-2 (pretrained by OpenAI").wait_for()
        assert_no_errors(page)
    finally:
        page.close()
