"""GPT-2 and SmolLM2 on the Attention tab in headless Chromium: pick one, analyse a text, see every head,
patch the names pair; the Generate tab's picker follows. Both are tiny random models in temporary folders (offline); a server
without the weights says so at once, and keeps saying it. Screenshots go to tests/screenshots/ for a person to look at.
"""

import re

import pytest
from support.app import serve
from support.browser import SCREENSHOTS, assert_no_errors, new_page, open_tab
from support.models import PRETRAINED_TEXT as TEXT

from playground.settings import Settings

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def gpt2_url(tiny_gpt2_folder, tiny_llama_folder):  # noqa: F811
    with serve(Settings.from_env({}, gpt2_weights=tiny_gpt2_folder, smollm2_weights=tiny_llama_folder)) as (_, url):
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
        # why this token: the patching boxes followed the picker to the names pair, which GPT-2 writes evenly
        page.locator("#patching-section").get_by_text("Why this token: activation patching").click()
        assert "John gave a drink" in page.locator("#patching-clean textarea").input_value()
        page.locator("#patching-run").click()
        # a random tiny GPT-2 may barely tell the names apart: shares are drawn only past a meaningful gap
        note = page.locator("#patching-note").filter(has_text=re.compile("brings back the most|none is drawn"))
        note.wait_for()
        if "brings back the most" in note.inner_text():
            page.locator("#patching-heads .main-svg").first.wait_for()
        page.locator("#circuits-section").get_by_text("A head's circuits").click()
        page.locator("#circuits-run").click()  # 50,257 tokens: a note, no figures
        page.locator("#circuits-note").filter(has_text="vocabulary has 50,257 tokens").wait_for()
        page.screenshot(path=str(SCREENSHOTS / "pretrained-attention.png"), full_page=True)
        open_tab(page, "Generate")  # the other tab reads GPT-2 too, and says so
        assert page.locator("#generate-model-choice").get_by_label("GPT-2 (pretrained)").is_checked()
        page.locator("#generate-model-info").filter(has_text="GPT-2 (pretrained by OpenAI").wait_for()
        assert_no_errors(page)
    finally:
        page.close()


@pytest.mark.parametrize("width, height", [(1366, 900), (390, 844)])
def test_switch_between_gpt2_and_smollm2_and_see_its_grouped_heads(browser, gpt2_url, width, height):
    page = new_page(browser, gpt2_url, width, height)
    try:
        open_tab(page, "Attention")
        choices = page.locator("#attention-model-choice")
        choices.get_by_label("GPT-2 (pretrained)").check()
        page.locator("#attention-model-note").filter(has_text="GPT-2 is read-only here").wait_for()
        choices.get_by_label("SmolLM2-135M (pretrained)").check()
        page.locator("#attention-model-note").filter(has_text="SmolLM2-135M is read-only here").wait_for()
        page.locator("#attention-text textarea").fill("the quick brown fox jumps over the lazy dog")
        page.locator("#attention-run").click()
        page.locator("#attention-status").filter(has_text="9 tokens").wait_for()
        page.locator("#attention-grid .js-plotly-plot").wait_for()
        assert page.locator("#attention-grid .heatmaplayer .hm").count() == 8
        page.locator("#attention-grid").get_by_text("each 2 adjacent heads share one key/value head").wait_for()
        page.screenshot(path=str(SCREENSHOTS / f"smollm2-attention-{width}x{height}.png"), full_page=True)
        open_tab(page, "Generate")
        page.locator("#generate-model-info").filter(has_text="SmolLM2-135M (pretrained by Hugging Face").wait_for()
        assert_no_errors(page)
    finally:
        page.close()


def test_without_weights_the_picker_says_so_at_once_and_keeps_saying_it(browser, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))  # GPT-2 at its default: the Hub, offline
    with serve(Settings.from_env({}, smollm2_weights=str(tmp_path / "no-weights-here"))) as (_, url):
        page = new_page(browser, url, 390, 844)  # a fresh page: nothing trained, nothing picked before
        try:
            open_tab(page, "Attention")
            for title in ("GPT-2", "SmolLM2-135M"):
                # a click, not check(): the page puts the choice back on "Your model", at times before check() looks
                page.locator("#attention-model-choice").get_by_label(f"{title} (pretrained)").click()
                note = page.locator("#attention-model-note").filter(has_text=f"{title} cannot be read here")
                note.wait_for(timeout=10_000)
                # It stays: the model did not change, so nothing follows it (it was wiped after 0.3 s, issue 30).
                page.wait_for_timeout(1000)
                assert "For whoever runs this server" in note.inner_text()
                assert page.locator("#attention-model-choice").get_by_label("Your model").is_checked()
            page.screenshot(path=str(SCREENSHOTS / "pretrained-offline-390x844.png"), full_page=True)
        finally:
            page.close()
