"""The real SmolLM2-135M-Instruct from its GGUF file (Q4_1) in headless Chromium, offered by the operator's
setting gguf_dir: Generate writes with it greedily, Attention analyses the names pair and patches it, at 1366 px,
then both tabs again at 390 px (the same page resized: a second run would only redo the same work). Screenshots go to tests/screenshots/ for a person to look at."""

import pytest
from support.app import serve
from support.browser import SCREENSHOTS, assert_no_errors, new_page, open_tab
from support.gguf_files import smollm2_gguf

from core.gguf import load_gguf
from core.sample import generate
from playground.settings import Settings
from playground.tabs.attention.patching import PAIRS

pytestmark = pytest.mark.browser

LABEL = "SmolLM2-135M-Instruct.Q4_1 (GGUF file)"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def url():
    # The public caps: patching all 270 heads of the names pair's 14 tokens fits its budget of multiply-adds.
    with serve(Settings.from_env({}, gguf_dir=str(smollm2_gguf()))) as (_, url):
        yield url


@pytest.fixture(scope="module")
def greedy():
    """What SmolLM2 writes after PROMPT, greedily, 12 tokens, read by core directly."""
    import torch

    smol = load_gguf(smollm2_gguf())
    ids = generate(smol.model, torch.tensor([smol.tokenizer.encode(PROMPT)]), 12, temperature=0)
    return smol.tokenizer.decode(ids[0].tolist())


def test_smollm2_from_its_gguf_writes_and_its_heads_patch_the_names_pair(browser, url, greedy):
    width, height = 1366, 900
    page = new_page(browser, url, width, height)
    try:
        open_tab(page, "Generate")
        page.locator("#generate-model-choice").get_by_label(LABEL).check()
        page.locator("#generate-model-note").filter(has_text="SmolLM2-135M-Instruct.Q4_1 is read-only here").wait_for()
        page.locator("#generate-model-info").filter(
            has_text="(a GGUF file on this server): 30 layers x 9 heads sharing 3 key/value heads").wait_for()
        page.locator("#prompt textarea").fill(PROMPT)
        page.get_by_label("Max new tokens").locator("xpath=..").locator("input[type=number]").first.fill("12")
        temperature = page.get_by_label("Temperature (0 = always the likeliest)")
        temperature.locator("xpath=..").locator("input[type=number]").first.fill("0")
        page.locator("#generate-button").click()
        page.locator("#generate-status").filter(has_text="12 tokens").wait_for()
        assert page.locator("#generated-text textarea").input_value() == greedy
        page.screenshot(path=str(SCREENSHOTS / f"gguf-generate-{width}x{height}.png"), full_page=True)

        open_tab(page, "Attention")  # the picker followed
        assert page.locator("#attention-model-choice").get_by_label(LABEL).is_checked()
        page.locator("#attention-text textarea").fill(PAIRS[1][0])
        page.locator("#attention-run").click()
        page.locator("#attention-status").filter(has_text="30 layer(s) x 9 head(s)").wait_for()
        page.locator("#attention-grid .js-plotly-plot").wait_for()
        page.locator("#patching-section").get_by_text("Why this token: activation patching").click()
        assert "John gave a drink" in page.locator("#patching-clean textarea").input_value()
        page.locator("#patching-run").click()
        page.locator("#patching-note").filter(has_text="brings back the most").wait_for(timeout=300_000)
        page.locator("#patching-heads .main-svg").first.wait_for()
        page.screenshot(path=str(SCREENSHOTS / f"gguf-attention-{width}x{height}.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_timeout(1500)  # Plotly redraws on the resize, a moment later
        page.screenshot(path=str(SCREENSHOTS / "gguf-attention-390x844.png"), full_page=True)
        open_tab(page, "Generate")
        page.locator("#generated-text textarea").wait_for()
        page.screenshot(path=str(SCREENSHOTS / "gguf-generate-390x844.png"), full_page=True)
        assert_no_errors(page)
    finally:
        page.close()
