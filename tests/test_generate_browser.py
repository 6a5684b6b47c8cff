"""The Generate tab in headless Chromium: train the default task through the Train tab at a laptop's
width, generate, click a token and see it marked, then type characters the model has never seen and
see which ones, and which it knows, while the previous output stays and nothing shows an error; then
type the README's example at temperature 0 and see it copied right and stopped at the end of its
answer line, said in the status (unticked, it writes on past it), and a word of another length named
as unlike the training words; then the same page narrowed to a phone's width, where the same is done
again (without training again). Screenshots at both widths go to tests/screenshots/ for a person to
look at."""

import pytest
from playwright.sync_api import expect

from support.browser import SCREENSHOTS, TIMEOUT_MS, assert_no_errors, open_tab, set_number

pytestmark = pytest.mark.browser
INSPECTED_BACKGROUND = "rgba(245, 158, 11, 0.5)"  # amber at the half opacity HighlightedText draws
LAPTOP, PHONE = {"width": 1366, "height": 900}, {"width": 390, "height": 844}
# The tab puts a line break before a copy-task prompt, and HighlightedText draws each line of an entry as a
# span of its own: the prompt "abc" is two spans, ↵ and abc, and the first generated token the third.
FIRST_TOKEN = 2


@pytest.fixture
def page(running_app, browser):
    page = browser.new_page(viewport=LAPTOP)
    page.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(running_app[1], wait_until="domcontentloaded")  # a new page: its own session
    page.locator("#train-button").wait_for()
    yield page
    page.close()


def close_toasts(page) -> None:
    page.evaluate("() => document.querySelectorAll(\"[data-testid='toast-close']\").forEach(b => b.click())")
    expect(page.locator(".toast-body")).to_have_count(0)


def shot(page, step: str) -> None:
    name = f"generate-{page.viewport_size['width']}-{step}.png"
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True, animations="disabled")


def generate_and_mark_a_token(page) -> None:
    """Generate from "abc", click the third generated token and see it, and only it, marked."""
    page.locator("#prompt textarea").fill("abc")
    page.locator("#generate-button").click()
    page.locator("#generate-status").filter(has_text="tokens. Click a token").wait_for()
    legend = page.locator("#generated-tokens [data-testid='highlighted-text:category-legend']")
    for band in ("under 10%", "90% or more", "inspected token"):
        expect(legend).to_contain_text(band)

    tokens = page.locator("#generated-tokens .token")
    expect(tokens.nth(FIRST_TOKEN)).to_have_css("background-color", INSPECTED_BACKGROUND)  # token 1 until a click
    tokens.nth(FIRST_TOKEN + 2).click()  # the third generated token
    expect(tokens.nth(FIRST_TOKEN + 2)).to_have_css("background-color", INSPECTED_BACKGROUND)
    expect(page.locator("#token-alternatives .gtitle")).to_contain_text("Token 3:")
    expect(page.locator("#token-info")).to_contain_text("Token 3,")
    marked = tokens.evaluate_all(
        f"spans => spans.filter(s => getComputedStyle(s).backgroundColor === '{INSPECTED_BACKGROUND}').length")
    assert marked == 1
    assert_no_errors(page)
    shot(page, "1-token-marked")


def refuse_unknown_characters(page) -> None:
    """A prompt with characters the model has never seen: the status names them and those it knows; the
    output, and its marked token, stay."""
    tokens = page.locator("#generated-tokens .token")
    before = page.locator("#generated-text textarea").input_value()
    count = tokens.count()
    page.locator("#prompt textarea").fill("Hello World")
    page.locator("#generate-button").click()
    page.locator(".toast-body").filter(has_text="not in this model's vocabulary").wait_for()
    for line in ("3 characters of the prompt are not in this model's vocabulary", "Not in it: ␣ (space), H, W.",
                 "The model knows these 28 characters: ↵ (newline), a–z, |."):
        expect(page.locator("#generate-status")).to_contain_text(line)
    assert page.locator("#generated-text textarea").input_value() == before
    assert tokens.count() == count
    expect(tokens.nth(FIRST_TOKEN + 2)).to_have_css("background-color", INSPECTED_BACKGROUND)
    assert_no_errors(page)
    shot(page, "2-unknown-characters")


def copy_the_readmes_example(page) -> None:
    """The README's `qwhzbkad|`, typed as shown, at temperature 0 and the tab's 200 new tokens: copied right,
    after the line break the tab puts before a copy-task prompt, shown as ↵ and said in the status, and
    stopped at the end of the answer line, said too. Unticked, it writes on past the ↵. Then a 5-letter
    word: named."""
    close_toasts(page)  # the refusal's, so that the screenshots show the page
    set_number(page, "Temperature (0 = always the likeliest)", 0)
    set_number(page, "Max new tokens", 200)
    stop_line = page.get_by_label("Stop at the end of the answer line")
    expect(stop_line).to_be_visible()
    expect(stop_line).to_be_checked()
    page.locator("#prompt textarea").fill("qwhzbkad|")
    page.locator("#generate-button").click()
    expect(page.locator("#generated-text textarea")).to_have_value("\nqwhzbkad|qwhzbkad\n")
    prompt = page.locator("#generated-tokens .token")
    expect(prompt.nth(0)).to_have_text("↵")
    expect(prompt.nth(1)).to_have_text("qwhzbkad|")
    status = page.locator("#generate-status")
    expect(status).to_contain_text("9 tokens.")
    expect(status).to_contain_text("Stopped at the end of the answer line (↵)")
    expect(status).to_contain_text("The prompt starts after a line break")
    assert_no_errors(page)
    shot(page, "3-readme-example")

    stop_line.uncheck()
    page.locator("#generate-button").click()
    expect(status).to_contain_text("200 tokens.")
    expect(status).not_to_contain_text("Stopped at the end")
    assert page.locator("#generated-text textarea").input_value().startswith("\nqwhzbkad|qwhzbkad\n")
    shot(page, "3-written-on")
    stop_line.check()

    page.locator("#prompt textarea").fill("hello|")
    page.locator("#generate-button").click()
    expect(page.locator("#generate-status")).to_contain_text(
        "This model was trained on 8-letter words (a–z) before |: hello has 5 letters.")
    assert_no_errors(page)
    shot(page, "4-unlike-training")


def test_generate_mark_a_token_refuse_unknown_characters_and_copy(page):
    # the default screen trained once on a laptop; then the same page (its session, its model) on a phone
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text="Done: 250 steps").wait_for()

    open_tab(page, "Generate")
    page.locator("#generate-model-info").filter(has_text="250 steps").wait_for()
    generate_and_mark_a_token(page)
    refuse_unknown_characters(page)
    copy_the_readmes_example(page)

    page.set_viewport_size(PHONE)
    open_tab(page, "Generate")  # on a phone the tab may sit in the "More tabs" menu
    page.locator("#generate-model-info").filter(has_text="250 steps").wait_for()
    # As on a new page: token 1 inspected, and no message left from the laptop's refusal.
    page.locator("#token-index input").fill("1")
    page.locator("#token-index input").press("Enter")
    expect(page.locator("#token-alternatives .gtitle")).to_contain_text("Token 1:")
    close_toasts(page)
    generate_and_mark_a_token(page)
    refuse_unknown_characters(page)
    copy_the_readmes_example(page)
