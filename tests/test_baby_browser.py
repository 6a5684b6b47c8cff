"""The Baby GPT tab in headless Chromium: the chain before and after training (and every frame
between, as the page drew it), a walk, a temperature change, and a longer run caught while it
trains. Screenshots go to tests/screenshots/ for a person to look at.
"""

import re

import pytest
from conftest import SCREENSHOTS

from playground.tabs import baby as tab

pytestmark = pytest.mark.browser
SLOW_REPLAY_S = 6.0
TITLE = re.compile(r"Step (\d+) / (\d+)")
TITLES = "babyTitles"
# Records every title the chain plot shows, with its time, as the page draws it.
RECORD_TITLES = f"""() => {{
  window.{TITLES} = [];
  const root = document.querySelector('#baby-chain');
  new MutationObserver(() => {{
    const title = root.querySelector('.gtitle');
    const text = title ? title.textContent : '';
    const log = window.{TITLES};
    if (text && (!log.length || log[log.length - 1][1] !== text)) log.push([performance.now(), text]);
  }}).observe(root, {{subtree: true, childList: true, characterData: true}});
}}"""


def chain_title(page) -> str:
    title = page.locator("#baby-chain .gtitle")
    return title.first.text_content() if title.count() else ""


def test_chain_animates_while_training_then_walks(running_app, browser, monkeypatch):
    _, url = running_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_role("tab", name="Baby GPT").click()
    chain = page.locator("#baby-chain")
    chain.locator(".gtitle").wait_for(timeout=30_000)
    assert chain_title(page).startswith("Step 0 / 50")  # the untrained default model
    assert chain.locator(".legendtext").filter(has_text="never in the training data").count() == 1
    chain.screenshot(path=str(SCREENSHOTS / "baby_before.png"))

    # Paced to 3 s (the app's default is MIN_ANIMATION_S): the server then sends ~15 frames, and
    # even a loaded 2-core CI machine, where the page may coalesce updates, draws several of them.
    monkeypatch.setattr(tab, "MIN_ANIMATION_S", 3.0)
    page.evaluate(RECORD_TITLES)  # in the page: polling from here would miss fast frames
    page.locator("#baby-train").click()
    page.locator("#baby-status").get_by_text("Trained 50 steps").wait_for(timeout=60_000)
    assert chain_title(page).startswith("Step 50 / 50")
    shown = [int(TITLE.search(title).group(1)) for _, title in page.evaluate(f"window.{TITLES}")]
    # the browser showed the chain forming step by step, not just its end
    assert shown == sorted(shown) and shown[-1] == 50
    assert len(set(shown) - {0, 50}) >= 4, shown
    page.locator("#baby-analysis").get_by_text("011 → 111 → 110 → 101 → 011").wait_for(timeout=10_000)
    page.locator("#baby-comparison .heatmaplayer").first.wait_for(timeout=10_000)
    chain.screenshot(path=str(SCREENSHOTS / "baby_after.png"))
    page.screenshot(path=str(SCREENSHOTS / "baby_tab.png"), full_page=True)

    # a walk drawn on the graph, then a temperature change redraws the edges (and clears it)
    page.locator("#baby-walk").click()
    page.locator("#baby-walk-text").get_by_text("The chain writes").wait_for(timeout=15_000)
    chain.locator(".legendtext").filter(has_text="walk: 30 steps").wait_for(timeout=10_000)
    chain.screenshot(path=str(SCREENSHOTS / "baby_walk.png"))
    number = page.locator("#baby-temperature input[type=number]")
    number.fill("0.3")
    number.press("Enter")
    page.locator("#baby-status").get_by_text("temperature 0.3").wait_for(timeout=15_000)
    assert chain.locator(".legendtext").filter(has_text="walk:").count() == 0
    chain.screenshot(path=str(SCREENSHOTS / "baby_cold.png"))

    # The default run plays in about a second: replayed slower (the app runs in this process),
    # it can be photographed mid-way even on a busy machine.
    monkeypatch.setattr(tab, "MIN_ANIMATION_S", SLOW_REPLAY_S)
    page.locator("#baby-train").click()
    page.wait_for_function(
        "/Step ([1-3][0-9]|40) \\/ 50/.test(document.querySelector('#baby-chain .gtitle').textContent)",
        timeout=30_000)
    # (on a very busy machine the picture may land after the end; the frames are checked above)
    chain.screenshot(path=str(SCREENSHOTS / "baby_during.png"))
    page.locator("#baby-status").get_by_text("Trained 50 steps").wait_for(timeout=60_000)
    assert page.locator(".toast-body.error").count() == 0
    page.close()
