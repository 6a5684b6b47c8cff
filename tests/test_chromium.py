"""Finding the browser tests' Chromium on any machine: $PLAYGROUND_CHROMIUM, then the usual names on
PATH, then Playwright's own download; none found is one line that says how to get one."""

import pytest
from support.browser import CHROMIUM_ARGS, CHROMIUM_ENV, find_chromium

pytestmark = pytest.mark.browser


@pytest.fixture
def real_chromium(playwright_api, monkeypatch) -> str:
    """This machine's Chromium, found before the tests below hide it."""
    found = find_chromium(playwright_api.chromium.executable_path)
    monkeypatch.delenv(CHROMIUM_ENV, raising=False)
    return found


def test_a_chromium_by_another_name_on_path_is_found_and_launches(playwright_api, real_chromium, tmp_path,
                                                                   monkeypatch):
    (tmp_path / "chromium-browser").symlink_to(real_chromium)
    monkeypatch.setenv("PATH", str(tmp_path))  # /usr/bin and its chromium out of sight
    found = find_chromium()
    assert found == str(tmp_path / "chromium-browser")
    browser = playwright_api.chromium.launch(executable_path=found, args=CHROMIUM_ARGS)
    try:
        page = browser.new_page()
        page.set_content("<p id='said'>found</p>")
        assert page.inner_text("#said") == "found"
    finally:
        browser.close()


def test_the_variable_comes_first_and_playwrights_own_last(real_chromium, tmp_path, monkeypatch):
    (tmp_path / "chrome").symlink_to(real_chromium)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_chromium(bundled=real_chromium) == str(tmp_path / "chrome")
    monkeypatch.setenv(CHROMIUM_ENV, real_chromium)
    assert find_chromium() == real_chromium
    monkeypatch.delenv(CHROMIUM_ENV)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_chromium(bundled=real_chromium) == real_chromium


def test_no_chromium_is_one_line_that_says_how_to_get_one(real_chromium, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LookupError) as nothing:
        find_chromium(bundled=str(tmp_path / "not-downloaded" / "chrome"))
    message = str(nothing.value)
    assert "\n" not in message and "found none" in message
    assert all(way in message for way in ("apt-get install chromium", "dnf install chromium", "brew install",
                                          "playwright install chromium", CHROMIUM_ENV))
    monkeypatch.setenv(CHROMIUM_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(LookupError, match=f"{CHROMIUM_ENV}={tmp_path / 'nowhere'} is not a file"):
        find_chromium(bundled=real_chromium)
