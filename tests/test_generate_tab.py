"""The Generate tab as a learner meets it, through its handlers (a session id stands in for
gr.Request): tokens shaded as confidence with a legend, the clicked token marked and named, and a
request the model cannot serve answered in the status while the previous output stays."""

import threading

import gradio as gr
import pytest

from playground.app import build_app
from playground.sessions import TrainedModel
from playground.figures.generation import CHOSEN_COLOR, alternatives_figure
from playground.tabs.generate import (
    COLOR_MAP, INSPECTED, LINE_START_NOTE, PROBABILITY_BANDS, STOPPED_NOTE, GenerateHandlers,
)
from playground.tabs.train import TrainHandlers
from support.handlers import make_ctx, run_train

GENERATE_OUTPUTS = ("generated-tokens", "generated-text", "generate-status", "token-alternatives", "token-info",
                    "token-index")
SKIP = gr.skip()


@pytest.fixture(scope="module")
def tab():
    """(ctx, generate handlers) with session "a" holding a copy-task model that has generated 30 tokens."""
    ctx = make_ctx()
    run_train(TrainHandlers(ctx))
    handlers = GenerateHandlers(ctx)
    last(handlers.generate("abc", 30, 0.8, 0, 1.0, 3, request="a"))
    return ctx, handlers


def last(updates):
    return list(updates)[-1]


def refused(handlers, prompt: str, session: str = "a", **fields) -> str:
    """The status of a generation that must not run: one update, with the tokens and text skipped."""
    args = dict(max_new_tokens=10, temperature=1.0, top_k=0, top_p=1.0, seed=None) | fields
    with pytest.warns(UserWarning) as toast:  # gr.Warning outside a page: the toast's text
        updates = list(handlers.generate(prompt, *args.values(), request=session))
    assert len(updates) == 1
    tokens, text, status = updates[0]
    assert tokens == SKIP and text == SKIP and status.startswith("⚠️")
    message = str(toast[0].message)
    assert "<" not in message and ">" not in message  # toasts render HTML
    return status


def luminance(hex_color: str) -> float:
    r, g, b = (int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


# ---------------------------------------------------------------- shading and the legend


def test_tokens_are_shaded_in_bands_that_darken_with_probability(tab):
    ctx, handlers = tab
    tokens, _, _ = last(handlers.generate("abc", 30, 1.0, 0, 1.0, 5, request="a"))
    steps = ctx.registry.get("a").last_steps
    assert tokens[0] == ("↵\nabc", None)  # a task model's prompt starts on a new line, shown
    lows = [low for low, _, _ in PROBABILITY_BANDS] + [float("inf")]
    ranges = {label: (lows[i], lows[i + 1]) for i, (_, label, _) in enumerate(PROBABILITY_BANDS)}
    for (_, band), step in zip(tokens[1:], steps, strict=True):
        low, high = ranges[band]
        assert low <= step.prob < high
    shades = [luminance(color) for _, _, color in PROBABILITY_BANDS]
    assert shades == sorted(shades, reverse=True)  # darker = more probable
    assert list(COLOR_MAP) == [label for _, label, _ in PROBABILITY_BANDS] + [INSPECTED]


def test_the_page_shows_the_bands_as_a_legend():
    demo = build_app()
    tokens = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "generated-tokens")
    assert tokens.show_legend and tokens.color_map == COLOR_MAP
    assert "darker = more probable" in tokens.label


def test_no_generate_event_can_put_an_error_badge_on_the_output():
    """A raised gr.Error marks every output of its event as failed unless progress is hidden."""
    demo = build_app()
    ours = {b._id for b in demo.blocks.values() if getattr(b, "elem_id", None) in GENERATE_OUTPUTS}
    events = [fn for fn in demo.fns.values() if ours & {block._id for block in fn.outputs}]
    assert len(events) >= 6
    assert all(fn.show_progress == "hidden" for fn in events), [fn.name for fn in events]


# ---------------------------------------------------------------- the inspected token


def test_a_clicked_token_is_marked_and_named(tab):
    ctx, handlers = tab
    index, tokens, figure, info = handlers.select_token(gr.SelectData(None, {"index": 4, "value": ["x", "y"]}), "a")
    step = ctx.registry.get("a").last_steps[3]
    assert index == 4
    assert [n for n, (_, band) in enumerate(tokens) if band == INSPECTED] == [4]
    label = next(label for token_id, label, _ in step.alternatives if token_id == step.token_id)
    assert figure.layout.title.text == f"Token 4: {label}"
    assert info.startswith("Token 4,") and f"{step.prob:.1%}" in info
    chosen = [color for color in figure.data[0].marker.color if color == CHOSEN_COLOR]
    assert chosen == [CHOSEN_COLOR]  # its bar, in the colour of its mark


def test_clicking_the_prompt_changes_nothing_but_the_hint(tab):
    _, handlers = tab
    assert handlers.select_token(gr.SelectData(None, {"index": 0, "value": ["abc", None]}), "a") == \
        (SKIP, SKIP, SKIP, "That is the prompt; click a generated token.")


def test_a_token_number_beyond_the_text_shows_its_last_token(tab):
    ctx, handlers = tab
    count = len(ctx.registry.get("a").last_steps)
    index, tokens, _, info = handlers.show_token(999, "a")
    assert index == count and tokens[count][1] == INSPECTED and info.startswith(f"Token {count},")
    assert handlers.show_token(-4, "a")[0] == 1


def test_stop_waits_for_the_stream_to_end_and_shows_its_final_count(tab):
    ctx, handlers = tab
    stream = handlers.generate("ab", 100, 1.0, 0, 1.0, 1, request="a")
    next(stream)  # the first tokens are shown; the stream is paused mid-generation
    answer = []
    stopping = threading.Thread(target=lambda: answer.append(handlers.stopped("a")))
    stopping.start()
    stopping.join(timeout=0.2)
    assert stopping.is_alive()  # Stop has cancelled the stream, which has not ended yet
    stream.close()  # what Gradio's cancel does
    stopping.join(timeout=10)
    session = ctx.registry.get("a")
    assert answer == [(session.last_text, f"{len(session.last_steps)} tokens. Click a token (or type its number) "
                                          "to see what else the model considered.  \n" + LINE_START_NOTE)]
    assert 0 < len(session.last_steps) < 100


def test_stop_with_nothing_generated_changes_nothing(tab):
    _, handlers = tab
    assert handlers.stopped("fresh") == (SKIP, SKIP)


# ---------------------------------------------------------------- a task model's prompt


def test_a_task_models_prompt_starts_after_a_line_break_shown_and_said(tab):
    """The copy task's lines each came after a line break, so the prompt gets one (once) as the model
    reads it: in the text, as a ↵ in the tokens, and in words in the status."""
    _, handlers = tab
    for typed in ("ab", "\nab"):
        tokens, text, status = last(handlers.generate(typed, 5, 0.0, 0, 1.0, -1, request="a"))
        assert tokens[0] == ("↵\nab", None) and text.startswith("\nab") and not text.startswith("\n\n")
        assert status.endswith("  \n" + LINE_START_NOTE)


def test_questions_unlike_the_training_ones_are_named_and_still_answered(tab):
    _, handlers = tab
    _, text, status = last(handlers.generate("hello|", 5, 0.0, 0, 1.0, -1, False, request="a"))
    assert text.startswith("\nhello|") and len(text) == len("\nhello|") + 5  # it still writes
    assert status.endswith(f"{LINE_START_NOTE}  \n⚠️ This model was trained on 8-letter words (a–z) before `|`: "
                           "`hello` has 5 letters. It never saw such a question, so what it writes for one is a guess.")
    _, _, status = last(handlers.generate("a|\nbb|\nccc|\n|", 5, 0.0, 0, 1.0, -1, request="a"))
    assert ("`a` has 1 letter; `bb` has 2 letters; `ccc` has 3 letters (and 1 more). It never saw" in status)


def test_a_task_model_stops_at_the_end_of_its_answer_line_and_says_so(tab):
    """By default (the API's too) the answer ends at the first ↵ the model writes, shown and said; unticked,
    it writes on into the next line's random letters."""
    ctx, handlers = tab
    prompt = "\nhello|"
    tokens, text, status = last(handlers.generate("hello|", 30, 0.0, 0, 1.0, -1, request="a"))
    steps = ctx.registry.get("a").last_steps
    assert len(steps) < 30 and text.endswith("\n") and "\n" not in text[len(prompt):-1]
    assert tokens[-1][0] == "↵\n" and STOPPED_NOTE in status
    assert status.index(STOPPED_NOTE) < status.index(LINE_START_NOTE)
    _, on, status = last(handlers.generate("hello|", 30, 0.0, 0, 1.0, -1, False, request="a"))
    assert len(ctx.registry.get("a").last_steps) == 30 and on.startswith(text) and len(on) > len(text)
    assert STOPPED_NOTE not in status and "Stop at the end" not in status
    with pytest.raises(gr.Error, match="Stop at the end of the answer line must be true or false"):
        list(handlers.generate("hello|", 30, 0.0, 0, 1.0, -1, "yes", request="a"))
    assert handlers.line_end_option("a")["visible"] is True  # the checkbox is shown for a task model
    assert handlers.line_end_option("nobody")["visible"] is False


def test_a_model_not_trained_on_a_task_reads_the_prompt_as_typed(tab):
    ctx, handlers = tab
    own = ctx.registry.get("a").trained
    ctx.registry.get("text").trained = TrainedModel(own.model, own.tokenizer, "your text")  # no task
    tokens, text, status = last(handlers.generate("ab", 5, 0.0, 0, 1.0, -1, request="text"))
    assert tokens[0] == ("ab", None) and text.startswith("ab") and status.endswith("else the model considered.")
    _, text, _ = last(handlers.generate("hello|", 30, 0.0, 0, 1.0, -1, request="text"))
    assert len(text) == len("hello|") + 30  # no answer line to stop at: it writes on past a ↵
    assert "\n" in text[len("hello|"):-1]
    assert handlers.line_end_option("text")["visible"] is False


# ---------------------------------------------------------------- requests the model cannot serve


def test_unknown_characters_are_named_with_the_allowed_ones_and_the_output_stays(tab):
    ctx, handlers = tab
    session = ctx.registry.get("a")
    steps, text = session.last_steps, session.last_text
    status = refused(handlers, "Hello World")
    assert "3 characters of the prompt are not in this model's vocabulary" in status
    assert "Not in it: `␣` (space), `H`, `W`." in status
    assert "knows these 28 characters: `↵` (newline), `a`–`z`, `|`." in status
    assert session.last_steps is steps and session.last_text == text  # still what the page shows


def test_markdown_and_html_characters_are_shown_as_themselves(tab):
    _, handlers = tab
    status = refused(handlers, "a<b>*_`")
    assert "Not in it: `*`, `<`, `>`, `_`, `` ` ``." in status  # code spans: never markup, never a tag


@pytest.mark.parametrize("prompt, session, shown", [
    ("abc", "nobody", "There is no model yet: train one on the Train tab"),
    ("abcdefghijklmnop", "a", "The prompt is 17 tokens long (the line break before it included); this model's "
                              "context is 16 tokens."),
])
def test_a_prompt_the_model_cannot_take_is_answered_in_the_status(tab, prompt, session, shown):
    _, handlers = tab
    assert shown in refused(handlers, prompt, session)


def test_generating_while_the_session_trains_is_answered_in_the_status(tab):
    ctx, handlers = tab
    with ctx.registry.job("a", "training"):
        assert "already running training" in refused(handlers, "abc")
    assert not ctx.registry.get("a").busy


def test_a_big_vocabulary_is_listed_in_ranges_and_cut_short():
    ctx = make_ctx()
    symbols = "".join(map(chr, range(0x2200, 0x2300)))  # 256 maths symbols, none a letter
    run_train(TrainHandlers(ctx), "big", corpus="paste", text=(symbols + "abcdefghijklmnopqrstuvwxyz") * 3, steps=1)
    status = refused(GenerateHandlers(ctx), "ab!", "big")
    assert "1 character of the prompt is not" in status and "Not in it: `!`." in status
    assert "these 282 characters: `a`–`z`, `∀`, `∁`" in status
    assert "… and 177 more." in status  # 80 entries shown: the range of 26, then 79 symbols
    assert len(status) < 1500


def test_a_malformed_field_raises_before_anything_changes(tab):
    ctx, handlers = tab
    steps = ctx.registry.get("a").last_steps
    with pytest.raises(gr.Error, match="Top-k must be at least 1"):
        list(handlers.generate("abc", 10, 1.0, -3, 1.0, None, request="a"))
    assert ctx.registry.get("a").last_steps is steps and not ctx.registry.get("a").busy


# ---------------------------------------------------------------- the alternatives chart


def test_the_chart_title_sits_below_the_toolbar_and_the_empty_chart_has_no_axes():
    figure = alternatives_figure([(1, "a", 0.5), (2, "b", 0.3), (3, "b", 0.1)], 2, "Token 1: b")
    assert figure.layout.title.yref == "paper" and figure.layout.title.yanchor == "bottom"
    assert figure.layout.margin.t >= 60  # Plotly's toolbar takes the top 30 px or so
    assert list(figure.data[0].y) == ["b (id 3)", "b (id 2)", "a"]  # repeated labels told apart
    empty = alternatives_figure([], None)
    assert empty.layout.xaxis.visible is False and empty.layout.yaxis.visible is False
