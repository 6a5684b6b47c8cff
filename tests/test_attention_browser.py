"""The Attention tab in headless Chromium: analyse a text, see every head, pick a query token.

The session gets a small model server-side (as if trained), so this test does not depend on
the Train tab. Screenshots go to tests/screenshots/ for a person to look at.
"""

import pytest
from conftest import SCREENSHOTS, serve

from core.config import GPTConfig
from core.data import repeat_corpus
from core.model import GPT
from core.tokenizers import CharTokenizer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def app_url():
    tokenizer = CharTokenizer.from_text(repeat_corpus(50))
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=32))
    with serve() as (demo, url):
        registry = demo.registry
        plain_get = registry.get

        def get_with_model(request):  # every session starts with a model, as if it had trained one
            session = plain_get(request)
            if session.model is None:
                session.model, session.tokenizer = model, tokenizer
            return session

        registry.get = get_with_model
        yield url


def test_attention_tab_shows_grid_summary_and_head_view(app_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(app_url, wait_until="domcontentloaded")
    page.get_by_role("tab", name="Attention").click()
    page.locator("#attention-text textarea").fill("qwhzbkad|qwhzbkad")
    page.locator("#attention-run").click()
    page.locator("#attention-status").get_by_text("17 tokens").wait_for(timeout=30_000)
    # 2 layers x 4 heads: eight heatmaps, each a plotly subplot
    page.locator("#attention-grid .heatmaplayer").first.wait_for(timeout=15_000)
    assert page.locator("#attention-grid .heatmaplayer").count() == 8
    assert page.locator("#attention-summary").get_by_text("H3").count() >= 1
    page.locator("#attention-view .legendtext").first.wait_for(timeout=15_000)
    assert page.locator("#attention-view .legendtext").count() == 4  # one entry per head
    assert page.locator(".toast-body.error").count() == 0
    page.screenshot(path=str(SCREENSHOTS / "attention_tab.png"), full_page=True)

    # an out-of-vocabulary text shows the server's message, not a crash
    page.locator("#attention-text textarea").fill("HELLO")
    page.locator("#attention-run").click()
    page.get_by_text("not in this model's vocabulary").first.wait_for(timeout=15_000)
    page.close()
