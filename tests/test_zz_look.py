import pytest
from conftest import serve
from test_browser import assert_no_errors, open_tab
from test_pretrained_app import tiny_gpt2_folder, tiny_llama_folder  # noqa: F401
from test_train_browser import new_page, open_page  # noqa: F401
from playground.settings import Settings


def why_tools(page, text, pair_label, layer, name):
    open_tab(page, "Attention")
    page.locator("#attention-text textarea").fill(text)
    page.locator("#attention-run").click()
    page.locator("#attention-status").get_by_text("tokens", exact=False).first.wait_for()
    page.locator("#attribution-section").get_by_text("Why this token: logit attribution").click()
    page.locator("#attribution-run").click()
    page.locator("#attribution-parts .js-plotly-plot").wait_for()
    page.locator("#patching-section").get_by_text("Why this token: activation patching").click()
    if pair_label:
        page.locator("#patching-section").get_by_text(pair_label).first.click()
    page.locator("#patching-run").click()
    page.locator("#patching-heads .js-plotly-plot").wait_for()
    page.locator("#circuits-section").get_by_text("A head's circuits").click()
    if layer:
        page.get_by_label("Layer", exact=True).first.click()
        page.get_by_role("option", name=layer).click()
    page.locator("#circuits-run").click()
    page.wait_for_timeout(3000)
    page.locator("#attribution-section").scroll_into_view_if_needed()
    page.screenshot(path=f"/tmp/ind/why-{name}-1366.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(2000)
    page.screenshot(path=f"/tmp/ind/why-{name}-390.png", full_page=True)
    assert_no_errors(page)


@pytest.mark.parametrize("preset, steps, text, pair, layer", [
    ("repeat", 250, "abcdefgh|abcdefg", None, None),
    ("induction", 400, "abcdefg|abcde", None, "Layer 1"),
])
def test_look(open_page, preset, steps, text, pair, layer):  # noqa: F811
    page = open_page(1366, 900)
    page.goto(page.url.split("?")[0] + f"?preset={preset}&steps={steps}")
    page.locator("#param-count").filter(has_text="parameters").wait_for()
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text=f"Done: {steps} steps").wait_for(timeout=300_000)
    why_tools(page, text, pair, layer, preset)


def test_look_gpt2(browser, tiny_gpt2_folder, tiny_llama_folder):  # noqa: F811
    with serve(Settings.from_env({}, gpt2_weights=tiny_gpt2_folder, smollm2_weights=tiny_llama_folder)) as (_, url):
        page = new_page(browser, url)
        open_tab(page, "Attention")
        page.locator("#attention-model-choice").get_by_label("GPT-2 (pretrained)").check()
        page.locator("#attention-model-note").filter(has_text="GPT-2 is read-only here").wait_for()
        why_tools(page, "When Mary and John went to the store, John gave a drink to", "When Mary", None, "gpt2")
