"""The teacher's link in headless Chromium: a link sets up the form, hides and locks its groups, Share
makes a link that opens the same setup (and trains the same curve), and a hostile link still opens
the page with a note on what it ignored. Screenshots go to tests/screenshots/ (git-ignored).
"""

from urllib.parse import quote

import pytest

from core.presets import PRESETS
from playground.tabs.train import link as share
from support.app import wait_until
from support.browser import SCREENSHOTS, assert_no_errors, browser_session, new_page

pytestmark = pytest.mark.browser
LINK = "?preset=sort&seed=7&n_layer=3&hide=training&lock=model"


@pytest.fixture
def open_link(running_app, browser):
    """Open the app at its address plus a query (`open_link(query)`); the pages close after the test."""
    pages = []

    def opener(query: str):
        pages.append(new_page(browser, running_app[1] + query))
        pages[-1].dialogs = []
        pages[-1].on("dialog", lambda dialog: (pages[-1].dialogs.append(dialog.message), dialog.dismiss()))
        return pages[-1]

    yield opener
    for page in pages:
        page.close()


def number(page, label: str):
    return page.get_by_label(f"number input for {label}")


def shared_link(page) -> str:
    page.locator("#share-button").click()
    box = page.locator("#share-link textarea")
    wait_until(lambda: box.count() and "?preset=" in box.input_value(), what="the shared link")
    return box.input_value()


def assert_set_up_by_the_link(page) -> None:
    """What LINK asks for: the sort preset with 3 layers, Training hidden, Model locked."""
    page.locator("#link-note").filter(has_text="This page's link set up the form").wait_for()
    preset = page.locator("#train-settings input").first
    wait_until(lambda: preset.input_value() == PRESETS["sort"].title, what="the preset")
    wait_until(lambda: number(page, "Layers").input_value() == "3", what="the layers")
    assert number(page, "Heads").input_value() == "4"  # the preset's own
    assert page.get_by_role("radio", name="Characters").is_checked()
    for label in ("Layers", "Heads", "Embedding size (n_embd)", "Block size (context)", "Dropout"):
        assert number(page, label).is_disabled(), label
    assert page.locator("#stage-dropdown input").is_disabled()
    assert preset.is_disabled()  # picking a preset would change the locked model
    assert not page.get_by_role("radio", name="Characters").is_disabled()  # data: neither hidden nor locked
    assert not number(page, "Steps").is_visible() and not number(page, "Seed").is_visible()
    assert "Ignored" not in page.locator("#link-note").inner_text()


def test_a_link_sets_up_the_form_and_share_makes_it_again(running_app, open_link):
    page = open_link(LINK)
    assert_set_up_by_the_link(page)
    page.locator("#param-count").filter(has_text="parameters").wait_for()
    page.screenshot(path=str(SCREENSHOTS / "share-link-opened.png"), full_page=True)
    link = shared_link(page)
    assert link == f"{running_app[1]}{LINK}"  # the page's own address; only what differs from the preset
    assert_no_errors(page)

    again = open_link(link[len(running_app[1]):])
    assert_set_up_by_the_link(again)
    assert shared_link(again) == link  # every field, the seed included, came back as it was
    again.screenshot(path=str(SCREENSHOTS / "share-link-shared.png"), full_page=True)
    assert_no_errors(again)


def test_the_same_link_trains_the_same_curve(running_app, open_link):
    """The seed draws the weights and the batches: two pages of one link train one curve."""
    registry = running_app[0].registry
    sessions = []
    for _ in range(2):
        before = set(registry._sessions)
        page = open_link("?preset=sort&seed=7&n_layer=1&n_embd=32&steps=30&eval_interval=10")
        sessions.append(browser_session(registry, before))
        wait_until(lambda: number(page, "Steps").input_value() == "30", what="the link's steps")
        page.locator("#train-button").click()
    for session in sessions:
        wait_until(lambda: session.trained is not None and session.job_name is None and session.trained.step == 30,
                 timeout=120, what="training")
    first, second = (session.trained.history for session in sessions)
    assert len(first) == 30 and first == second


def test_a_learner_cannot_change_a_locked_field(open_link):
    page = open_link("?preset=repeat&stage=multi_head&lock=model")  # a stage that unlocks Heads elsewhere
    page.locator("#link-note").filter(has_text="It locks").wait_for()
    wait_until(lambda: page.locator("#stage-dropdown input").input_value().startswith("4."), what="the stage")
    page.wait_for_timeout(1000)  # the stage's own change event has answered by now
    assert number(page, "Heads").is_disabled() and number(page, "Layers").is_disabled()
    reset = page.get_by_label("Reset to default value")
    assert all(reset.nth(i).is_disabled() for i in range(5))  # the model's five sliders
    page.get_by_text("Checkpoint: download or upload").click()
    page.get_by_text("Upload a checkpoint .zip").wait_for()
    assert page.locator("#train-live input[type=file]").count() == 0  # no checkpoint replaces the model
    assert_no_errors(page)


@pytest.mark.parametrize("query, named", [
    ("?preset=../../etc&hide=" + quote("<script>alert(1)</script>") + "&n_layer=1e999&seed=-5&lock=..%2Fx"
     "&steps=" + "9" * 300 + "&" + quote("<img src=x onerror=alert(2)>") + "=1&corpus=%00",
     ["preset=../../etc", "hide=<script>alert(1)</script>", "n_layer=1e999", "seed=-5", "lock=../x",
      f"steps={'9' * share.SHOWN_CHARS}...", "<img src=x onerror=alert(2)>", "corpus="]),
    ("?n_layer=3&seed=" + "7" * 10_000, ["the whole link (10,015 characters; at most 2,000)"]),
])
def test_a_hostile_link_opens_the_page_and_says_what_it_ignored(running_app, open_link, query, named):
    page = open_link(query)
    note = page.locator("#link-note").filter(has_text="Ignored from the link")
    note.wait_for()
    text = note.inner_text()
    for part in named:
        assert part in text, part
    assert page.locator("#link-note script, #link-note img").count() == 0  # shown as text, never markup
    assert number(page, "Layers").input_value() == str(PRESETS["repeat"].model["n_layer"])  # the default form stands
    assert not page.dialogs
    page.screenshot(path=str(SCREENSHOTS / "share-link-hostile.png"), full_page=True)
    assert_no_errors(page)
    assert shared_link(page) == f"{running_app[1]}?preset=repeat&seed=1337"


def test_a_plain_address_shows_no_note_and_a_picked_preset_fills_the_form(open_link):
    page = open_link("")
    page.locator("#param-count").filter(has_text="parameters").wait_for()
    assert not page.locator("#link-note").is_visible()
    assert not number(page, "Layers").is_disabled()
    page.locator("#train-settings input").first.click()
    page.get_by_role("option", name=PRESETS["binary"].title).click()
    wait_until(lambda: number(page, "Block size (context)").input_value() == "3", what="the preset's context")
    assert number(page, "Layers").input_value() == "4"
    assert shared_link(page).endswith("/?preset=binary&seed=1337")
    assert_no_errors(page)
