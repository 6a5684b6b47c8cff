"""The Attention tab's page in the browser tests: the default task trained, the copy example analysed, figures' boxes.

Never imports a test module.
"""

from .browser import LAPTOP, new_page, open_tab, set_number

TRAINED_TIMEOUT_MS = 120_000  # generous: other jobs share these 2 cores
STEPS = 150  # of the default preset's 400: its copying head has formed by then
EXAMPLE = "qwhzbkad|qwhzbkad"
FIGURES = ("attention-summary", "attention-grid", "attention-large", "attention-view")


def trained_page(browser, url: str, **options):
    """A new learner's page with the default task trained for STEPS steps."""
    page = new_page(browser, url, **LAPTOP, **options)
    page.set_default_timeout(TRAINED_TIMEOUT_MS)
    set_number(page, "Steps", STEPS)
    page.locator("#train-button").click()
    page.locator("#train-status").filter(has_text=f"Done: {STEPS} steps").wait_for()
    return page


def analyse(page, text: str, n_tokens: int) -> None:
    page.locator("#attention-text textarea").fill(text)
    page.locator("#attention-run").click()
    page.locator("#attention-status").get_by_text(f"{n_tokens} tokens", exact=True).wait_for()


def analyse_example(page) -> str:
    """Analyse the copy example; the status text once every figure has drawn."""
    open_tab(page, "Attention")
    analyse(page, EXAMPLE[:8], 8)  # a different status first, so the example's cannot be a stale one
    analyse(page, EXAMPLE, 17)
    return figures_drawn(page)


def figures_drawn(page) -> str:
    """The status, once every figure has drawn."""
    for figure in FIGURES:
        page.locator(f"#{figure} .main-svg").first.wait_for()
    page.locator("#attention-view .legendtext").first.wait_for()
    return page.locator("#attention-status").inner_text()


def overlaps(boxes: list[dict]) -> list[tuple]:
    """Pairs of boxes {left, right, top, bottom} that overlap by more than a pixel."""
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if min(a["right"], b["right"]) - max(a["left"], b["left"]) > 1
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 1]


def boxes(page, selector: str) -> list[dict]:
    """The drawn boxes of the visible elements matching `selector`."""
    return page.locator(selector).evaluate_all("""nodes => nodes
        .filter(n => n.getClientRects().length && getComputedStyle(n).display !== 'none'
                     && getComputedStyle(n).visibility !== 'hidden' && n.textContent.trim())
        .map(n => { const r = n.getBoundingClientRect();
                    return {text: n.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom}; })""")


def assert_titles_clear(page, figures, obstacles: tuple[str, ...]) -> None:
    """Each figure's title clear of what sits in its corner (the toolbar, Gradio's label, buttons)."""
    for figure in figures:
        title = boxes(page, f"#{figure} .gtitle")
        others = [box for selector in obstacles for box in boxes(page, f"#{figure} {selector}")]
        assert title and others, figure
        for other in others:
            assert not overlaps(title + [other]), (figure, title, other)
