"""The Attention tab's handlers as plain functions, and the size of every figure it sends.

The copy-task tests train the default preset's model (fewer steps) once for the module: it
learns a layer-0 head that looks 8 back, the head the tab once called induction.
"""

import json
import re

import gradio as gr
import numpy as np
import pytest
import torch

from core.attention import attention_maps, head_view, induction_probe, probe_induction, summarize_heads
from core.attribution import LARGE_EFFECT, HeadEffects
from core.movie import AttentionMovie, induction_onset
from core.config import stage_config
from core.data import CORPORA, TokenData
from core.model import GPT
from core.observers import AttentionProbe, standard
from core.presets import preset_configs, preset_corpus
from core.tokenizers import CharTokenizer, GPT2Tokenizer
from core.train import Trainer
from playground.figures import attention as figures
from playground.sessions import TrainedModel
from playground.tabs import attention as tab
from playground.tabs.attention import analysis
from playground.tabs.train.replay import MOVIE_FRAMES, movie_note
from support.handlers import VOCAB, give_model, make_attention_ctx

PAYLOAD_LIMIT = 2_000_000


def figure_json(fig) -> dict:
    return json.loads(fig.to_json())


# ---------------------------------------------------------------- analyse


def test_analyse_fills_every_output_and_keeps_the_analysis(attention_ctx, handlers):
    session = give_model(attention_ctx)
    status, grid, summary, table, layer, head, query, large, view, view_note, effects = handlers.analysis.analyse(
        "abcab|abcab", "alice")
    assert "**11 tokens**, 2 layer(s) x 3 head(s)" in status
    assert len(figure_json(grid)["data"]) == 6  # every layer x head
    assert len(table) == 6 and len(table[0]) == len(figures.SUMMARY_HEADERS)
    assert [choice[1] for choice in layer.choices] == [0, 1]
    assert [choice[1] for choice in head.choices] == [0, 1, 2]
    assert query.value == 10 and query.choices[10][0] == "#10 b"  # the last token, labelled
    assert session.attention.maps.shape == (2, 3, 11, 11)
    assert session.attention.ids == CharTokenizer(VOCAB).encode("abcab|abcab")
    assert session.job_name is None  # the job lock was released


def test_analyse_opens_the_most_distinctive_head(attention_ctx, handlers):
    session = give_model(attention_ctx)

    def previous_token_head(module, inputs, pattern):  # layer 1, head 2 becomes a textbook head
        pattern = pattern.clone()
        n = pattern.size(-1)
        pattern[:, 2] = torch.eye(n).roll(-1, dims=1).tril()  # row q -> key q - 1
        pattern[:, 2, 0, 0] = 1
        return pattern

    session.model.blocks[1].attn.hook_pattern.register_forward_hook(previous_token_head)
    status, _, _, _, layer, head, _, large, view, view_note, _ = handlers.analysis.analyse("abcdefgh", "alice")
    assert (layer.value, head.value) == (1, 2)
    assert "L1 H2 previous-token (1.00)" in status and "the strongest is open below" in status
    assert "Layer 1, head 2" in figure_json(large)["layout"]["title"]["text"]
    assert "Layer 1" in figure_json(view)["layout"]["title"]["text"]
    assert r"layer 1: \#7 h looks most at" in view_note and r"\#6 g in head 2 (1.00)" in view_note  # in words too


def test_analyse_says_which_heads_the_probe_found_even_when_nothing_repeats(attention_ctx, handlers):
    give_model(attention_ctx)  # untrained: no head follows repeats
    status = handlers.analysis.analyse("abcdefg", "alice")[0]
    assert "No induction head: no head past layer 0 follows the repeats" in status
    assert "**Induction probe** writes such a text" in status


def test_a_context_too_short_for_the_probe_says_induction_is_untested(attention_ctx, handlers):
    session = give_model(attention_ctx, block_size=7)
    status = handlers.analysis.analyse("abcabc", "alice")[0]
    assert "Induction untested" in status
    assert all(s.probe_induction is None and s.label != "induction" for s in session.attention.summaries)


@pytest.mark.parametrize("text, message", [
    ("", "Text is empty"),
    ("   ", "Text is empty"),
    ("ABC", "not in this model's vocabulary"),
    ("a", "fewer than 2 tokens"),
])
def test_analyse_rejects_bad_text_and_keeps_the_model(attention_ctx, handlers, text, message):
    session = give_model(attention_ctx)
    model = session.model
    with pytest.raises(gr.Error, match=message):
        handlers.analysis.analyse(text, "alice")
    assert session.model is model and session.attention is None and session.job_name is None


def test_a_text_longer_than_the_context_is_cut_and_the_status_says_so(attention_ctx, handlers):
    session = give_model(attention_ctx)
    status, grid, *_ = handlers.analysis.analyse("abcdefghijklmnopqrstu", "alice")  # 21 tokens; context 16
    assert "Kept the first 16 of the text's 21 tokens: this model's context is 16 tokens" in status
    assert "**16 tokens**" in status
    assert session.attention.ids == CharTokenizer(VOCAB).encode("abcdefghijklmnop")
    assert len(figure_json(grid)["data"][0]["x"]) == 16


def test_a_text_longer_than_the_server_shows_is_cut_with_a_hint(attention_ctx, handlers):
    session = give_model(attention_ctx, block_size=32)  # the context allows it, this server (20 tokens) does not
    status = handlers.analysis.analyse("a" * 25, "alice")[0]
    assert re.search("Kept the first 20 of the text's 25 tokens: this server shows at most 20.*"
                     "PLAYGROUND_MAX_ATTENTION_TOKENS", status)
    assert len(session.attention.ids) == 20


def test_every_example_analyses_on_a_short_context_model():
    """The Shakespeare example has 60 tokens: on a model of context 32 it is cut, not refused."""
    handlers = tab.AttentionHandlers(make_attention_ctx())
    tokenizer = CharTokenizer.from_text("".join(analysis.EXAMPLES))
    session = give_model(handlers.ctx, tokenizer=tokenizer, block_size=32)
    for example in analysis.EXAMPLES:
        status = handlers.analysis.analyse(example, "alice")[0]
        n_tokens = len(tokenizer.encode(example))
        assert f"**{min(n_tokens, 32)} tokens**" in status
        assert ("Kept the first 32" in status) == (n_tokens > 32)
    assert len(tokenizer.encode(analysis.EXAMPLES[0])) > 32  # the case this test is about
    assert session.job_name is None


def test_analyse_without_a_model_or_without_attention(attention_ctx, handlers):
    with pytest.raises(gr.Error, match="no model yet"):
        handlers.analysis.analyse("abc", "bob")
    session = attention_ctx.registry.get("carol")
    bigram = GPT(stage_config("bigram", vocab_size=len(VOCAB), block_size=16, n_embd=8))
    session.trained = TrainedModel(bigram, CharTokenizer(VOCAB), "a test corpus")
    with pytest.raises(gr.Error, match="no attention layers"):
        handlers.analysis.analyse("abc", "carol")


def test_analyse_refuses_while_the_session_trains(attention_ctx, handlers):
    give_model(attention_ctx)
    with attention_ctx.registry.job("alice", "training"):
        with pytest.raises(gr.Error, match="already running training"):
            handlers.analysis.analyse("abc", "alice")


def test_sessions_do_not_see_each_others_analysis(attention_ctx, handlers):
    give_model(attention_ctx, "alice")
    give_model(attention_ctx, "bob")
    handlers.analysis.analyse("abcabc", "alice")
    assert attention_ctx.registry.get("bob").attention is None
    with pytest.raises(gr.Error, match="Analyse a text first"):
        handlers.analysis.show_head(0, 0, "bob")


# ---------------------------------------------------------------- pickers


def test_pickers_redraw_from_the_kept_analysis(attention_ctx, handlers):
    session = give_model(attention_ctx)
    handlers.analysis.analyse("abcab|abcab", "alice")
    expected = attention_maps(session.model, session.attention.ids)
    large = handlers.analysis.show_head(1, 2, "alice")
    assert "Layer 1, head 2" in large.layout.title.text
    np.testing.assert_allclose(large.data[0].z, expected[1, 2].numpy(), atol=2e-4)  # that head's map, no other's
    view, note = handlers.analysis.show_query(1, 4, "alice")
    assert note.startswith(r"**Head view**, layer 1: \#4 b looks most at")
    hover = [t for t in view.data if t.customdata is not None][0].customdata
    shown = float(hover[2].split("<br>")[0].removeprefix("head 0: "))  # key 2, head 0 first
    assert shown == pytest.approx(float(expected[1, 0, 4, 2]), abs=2e-4)  # float16 keeps ~4 digits


@pytest.mark.parametrize("layer, head, message", [
    (2, 0, "Layer must be at most 1"),
    (0, 3, "Head must be at most 2"),
    (float("nan"), 0, "Layer must be a finite number"),
    (0.5, 0, "Layer must be a whole number"),
])
def test_pickers_check_numbers_sent_through_the_api(attention_ctx, handlers, layer, head, message):
    give_model(attention_ctx)
    handlers.analysis.analyse("abcabc", "alice")
    with pytest.raises(gr.Error, match=message):
        handlers.analysis.show_head(layer, head, "alice")


def test_query_picker_checks_the_position(attention_ctx, handlers):
    give_model(attention_ctx)
    handlers.analysis.analyse("abcabc", "alice")
    with pytest.raises(gr.Error, match="Query token must be at most 5"):
        handlers.analysis.show_query(0, 6, "alice")


def test_table_click_opens_that_head(attention_ctx, handlers):
    give_model(attention_ctx)
    handlers.analysis.analyse("abcabc", "alice")
    event = gr.SelectData(None, {"index": [4, 2], "value": "self", "row_value": [1, 1, "self"]})
    layer, head, large = handlers.analysis.select_head(event, "alice")
    assert (layer, head) == (1, 1)
    assert "Layer 1, head 1" in figure_json(large)["layout"]["title"]["text"]


# ---------------------------------------------------------------- text sources


def test_last_generated_text_is_offered_and_cut_to_the_context(attention_ctx, handlers):
    session = give_model(attention_ctx)
    with pytest.raises(gr.Error, match="Nothing generated yet"):
        handlers.analysis.last_text("alice")
    session.last_text = "hello world"
    assert handlers.analysis.last_text("alice") == "hello world"
    session.last_text = "abcdefghijklmnopqrstuvwxyz"  # 26 tokens; context 16
    assert handlers.analysis.last_text("alice") == "klmnopqrstuvwxyz"


def test_last_text_of_a_bpe_model_fits_the_context(attention_ctx, handlers):
    session = give_model(attention_ctx, tokenizer=GPT2Tokenizer())
    session.last_text = "smile 🙂🙃 " * 12  # emoji are several byte-level tokens each; the cut splits one
    text = handlers.analysis.last_text("alice")
    assert 0 < len(session.tokenizer.encode(text)) <= 16
    assert text.endswith("🙃 ")
    handlers.analysis.analyse(text, "alice")  # and it analyses without a context error


def test_induction_probe_repeats_itself_fits_and_varies_its_length(attention_ctx, handlers):
    give_model(attention_ctx)
    lengths = set()
    for _ in range(12):
        text = handlers.analysis.probe("alice")
        half = len(text) // 2
        assert 4 <= len(text) <= 16 and text[:half] == text[half:]
        assert set(text) <= set(VOCAB)
        lengths.add(len(text))
    assert len(lengths) > 1  # a fixed-offset head cannot match every probe
    handlers.analysis.analyse(text, "alice")


@pytest.mark.parametrize("position", ["rope", "alibi", "none"])
def test_induction_probe_fits_a_context_that_computed_positions_could_pass(position):
    """induction-rope's 40-token model: its positions would read further, but it trained on 40."""
    attention_ctx = make_attention_ctx(max_attention_tokens=200)
    handlers = tab.AttentionHandlers(attention_ctx)
    give_model(attention_ctx, block_size=40, position=position, n_head=2)
    lengths = set()
    for _ in range(12):
        text = handlers.analysis.probe("alice")
        lengths.add(len(text))
        status = handlers.analysis.analyse(text, "alice")[0]
        assert "Past its training length" not in status
    assert max(lengths) <= 40 and len(lengths) > 1


def test_model_changed_marks_an_analysis_stale(attention_ctx, handlers):
    give_model(attention_ctx)
    assert handlers.analysis.model_changed("alice") == gr.skip()  # no analysis on screen: the status stays as it is
    handlers.analysis.analyse("abcabc", "alice")
    # An Analyse pressed right after a change can finish before the change's event: its status stays.
    assert handlers.analysis.model_changed("alice") == gr.skip()
    give_model(attention_ctx)  # a new model: the analysis on screen is of the old one
    assert "press **Analyse**" in handlers.analysis.model_changed("alice")


# ---------------------------------------------------------------- the copy task: one labelling everywhere

COPY_EXAMPLE = "qwhzbkad|qwhzbkad"
STANDOUT = re.compile(r"L(\d+) H(\d+) ([a-z-]+) \((\d\.\d\d)\)")


@pytest.fixture(scope="module")
def copy_task():
    """The default preset ("repeat") trained as the app trains it, its attention movie recorded: its 8-back
    head has formed."""
    text, tokenizer = preset_corpus("repeat")
    config, train_config = preset_configs("repeat", tokenizer.vocab_size)
    model = GPT(config, generator=torch.Generator().manual_seed(train_config.seed))
    data = TokenData.from_text(text, tokenizer, config.block_size, answer_after=CORPORA["repeat"].answer_after)
    trainer, snapshots = Trainer(model, data, train_config, observers=standard(train_config)), AttentionProbe()
    every = train_config.max_iters // MOVIE_FRAMES  # as the Train tab records
    movie = AttentionMovie(snapshots.probe_ids(trainer), every=every)
    for event in trainer.run():
        if movie.wants(event.step) or event.done:
            probe = probe_induction(trainer.model) if movie.probe_due(event.done) else None
            movie.add(event.step, snapshots.attention(trainer), probe)
    handlers = tab.AttentionHandlers(make_attention_ctx())
    session = handlers.ctx.registry.get("learner")
    session.trained = TrainedModel(model, tokenizer, "Copy task", movie=movie)
    return handlers, session


def labels(session) -> dict[tuple[int, int], str]:
    return {(s.layer, s.head): s.label for s in session.attention.summaries}


def test_copy_task_headline_table_and_board_agree(copy_task):
    handlers, session = copy_task
    status, _, board, table, *_ = handlers.analysis.analyse(COPY_EXAMPLE, "learner")
    rows = {(row[0], row[1]): row for row in table}
    headline = next(line for line in status.split("\n") if line.startswith("Heads to look at first"))
    standouts = STANDOUT.findall(headline)
    # the head that copies looks 8 back from layer 0: by position, so not an induction head
    assert (standouts[0][0], standouts[0][2]) == ("0", "fixed-offset")
    label_column, score_column = figures.SUMMARY_HEADERS.index("label"), figures.SUMMARY_HEADERS.index("score")
    for layer, head, label, score in standouts:  # the label, and after it the head's effect where it is large
        row = rows[int(layer), int(head)]
        assert row[label_column].split(" · ")[0] == label and row[score_column] == score
    for s in session.attention.summaries:
        name, score, *effect = board.data[0].text[s.layer][s.head].split("<br>")
        assert name == (f"{s.offset} back" if s.label == "fixed-offset" else s.label)
        assert score == rows[s.layer, s.head][score_column]
        assert bool(effect) == ("of the effect" in rows[s.layer, s.head][label_column])
    assert not [key for key, label in labels(session).items() if key[0] == 0 and label == "induction"]
    # the status lists exactly the heads whose probe column passes the rule
    probe = figures.SUMMARY_HEADERS.index("probe")
    passing = {f"L{layer} H{head}" for (layer, head), row in rows.items() if layer > 0 and float(row[probe]) >= 0.5}
    induction_line = status.split("\n")[-1]
    assert set(re.findall(r"L\d+ H\d+", induction_line)) == passing
    assert induction_line.startswith("Induction heads" if passing else "No induction head")


def test_copy_task_replay_note_agrees_with_the_attention_tab(copy_task):
    """The replay note once named "induction L0 H1 (0.68)" here: the probe text is a copy-task line, where the
    8-back head lands where an induction head would. It now gives the tab's verdict, by the same probe."""
    handlers, session = copy_task
    status = handlers.analysis.analyse(COPY_EXAMPLE, "learner")[0]
    movie = session.trained.movie
    assert torch.equal(movie.frames[-1].probe, probe_induction(session.model))  # the very scores the tab reads
    assert status.split("\n")[-1].startswith("No induction head: no head past layer 0")
    note = movie_note(movie, False)
    assert f"No induction head at step {movie.frames[-1].step}: no head past layer 0" in note
    assert not re.search(r"induction L\d", note) and induction_onset(movie) is None
    assert movie.score_curve("previous-token") is not None and not movie.induction_curve()[1].any()


def test_copy_task_probe_agrees_with_the_example(copy_task):
    handlers, session = copy_task
    handlers.analysis.analyse(COPY_EXAMPLE, "learner")
    on_example = labels(session)
    strongest = analysis._standouts(session.attention)[0]
    tokenizer = session.tokenizer
    # the probe button's texts, and a repeat of 9, the copy task's own period: there 8 back is
    # exactly where an induction head would look, and only the probe's verdict tells them apart
    texts = [handlers.analysis.probe("learner") for _ in range(3)]
    texts.append(tokenizer.decode(induction_probe(tokenizer.vocab_size, 9, seed=1)))
    for text in texts:
        handlers.analysis.analyse(text, "learner")
        on_probe = labels(session)
        assert on_probe[strongest.layer, strongest.head] == strongest.label, text
        for key, label in on_example.items():
            assert (label == "induction") == (on_probe[key] == "induction"), (key, text)
    period_9 = next(s for s in session.attention.summaries if (s.layer, s.head) == (strongest.layer, strongest.head))
    assert period_9.scores["induction"] > 0.5 and period_9.label == "fixed-offset"
    assert "a layer-0 head cannot be one" in period_9.explanation


# ---------------------------------------------------------------- figures: size and content


@pytest.fixture(scope="module")
def largest():
    """12 layers x 12 heads x 256 tokens, the size the issue asks to stay fast for."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(12, 12, 256, 256, generator=generator)
    scores = scores.masked_fill(torch.ones(256, 256).triu(1).bool(), float("-inf"))
    ids = torch.randint(50, (256,), generator=generator).tolist()
    return torch.softmax(scores, -1), ids, [f"t{i}" for i in ids]


def test_every_figure_stays_under_2_mb_at_12x12x256(largest):
    maps, ids, labels = largest
    summaries = summarize_heads(maps, ids)
    built = {
        "grid": figures.heatmap_grid(maps, labels),
        "large": figures.head_heatmap(maps[11, 11], labels, 11, 11),
        "view": figures.head_view(head_view(maps, 255)[11], labels, 255, 11),
        "summary": figures.summary_figure(summaries),
        "live": figures.live_heatmap(maps[:, :, :64, :64], labels[:64]),
    }
    for name, fig in built.items():
        assert len(fig.to_json()) < PAYLOAD_LIMIT, name
    grid = figure_json(built["grid"])
    assert len(grid["data"]) == 144
    assert "Pooled: 256 tokens in groups of 8" in grid["layout"]["title"]["subtitle"]["text"]
    assert len(grid["data"][0]["x"]) == 32


def test_grid_shows_exact_unpooled_weights_with_labels_when_small():
    maps = torch.softmax(torch.randn(2, 2, 5, 5), -1)
    labels = ["a", "b", "a", "␣", "c"]
    grid = figures.heatmap_grid(maps, labels)
    first = grid.data[0]
    assert list(first.x) == ["#0 a", "#1 b", "#2 a", "#3 ␣", "#4 c"]  # repeated tokens stay distinct
    assert torch.allclose(torch.tensor(first.z), maps[0, 0], atol=1e-6)
    assert not grid.layout.title.subtitle.text  # nothing pooled
    assert grid.layout.coloraxis.cmin == 0 and grid.layout.coloraxis.cmax == 1  # one shared scale


def test_head_view_draws_one_legend_entry_per_head_and_weights_as_lines():
    weights = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.0, 1.0]])  # 2 heads, query 2
    fig = figures.head_view(weights, ["x", "y", "z"], 2, 0)
    legend = [t.name for t in fig.data if t.showlegend is not False and t.name]
    assert legend == ["head 0", "head 1"]
    lines = [t for t in fig.data if t.mode == "lines" and t.legendgroup == "head 0"]
    heaviest = max(lines, key=lambda t: t.opacity)
    assert list(heaviest.y) == [2, 0, None]  # query row 2 -> key 0, the 0.9 weight
    assert all(t.opacity <= heaviest.opacity for t in lines)


def test_head_view_groups_keys_of_long_texts():
    weights = torch.softmax(torch.randn(3, 200), -1)
    fig = figures.head_view(weights, ["t"] * 200, 199, 0)
    assert "keys grouped by 4" in fig.layout.title.subtitle.text


def test_every_table_column_has_a_width_and_all_fit_a_laptop_screen():
    # a column without a width took whatever was left, and the explanation was cut off at 1366 px
    assert len(figures.SUMMARY_WIDTHS) == len(figures.SUMMARY_HEADERS)
    assert sum(figures.SUMMARY_WIDTHS) <= 1180  # the table's width in the app at 1366 px
    for header in figures.SUMMARY_HEADERS:
        assert f"**{header}**" in figures.SUMMARY_LEGEND or header in ("layer", "head", "label", "what it does")


def test_figure_titles_sit_below_the_toolbar_and_the_large_view_thins_its_ticks():
    maps = torch.softmax(torch.randn(2, 2, 40, 40), -1)
    labels = [f"t{i}" for i in range(40)]
    built = [figures.heatmap_grid(maps, labels), figures.head_heatmap(maps[0, 0], labels, 0, 0),
             figures.head_view(maps[0, :, 39], labels, 39, 0),
             figures.summary_figure(summarize_heads(maps, list(range(40))))]
    for fig in built:
        title = fig.layout.title
        assert title.yref == "container" and title.pad.t >= figures.TITLE_TOP_PX
        assert fig.layout.margin.t >= figures.TOP_MARGIN_PX
        assert "zoomin" in fig.layout.modebar.remove  # a short toolbar leaves a phone's block label clear
    large = built[1]
    assert large.layout.xaxis.tickmode != "array" and large.layout.yaxis.tickmode != "array"  # plotly thins them


def test_a_head_with_a_large_effect_gets_a_word_whatever_its_label():
    """The summary's rows show each head's measured effect beside its pattern label; a head with a large one
    has it in its label cell and on the board, a head with a small one only in the effect column."""
    maps = torch.softmax(torch.randn(2, 3, 6, 6), -1) * torch.ones(6, 6).tril()
    summaries = summarize_heads(maps / maps.sum(-1, keepdim=True), [1, 2, 3, 4, 5, 6])
    shares = torch.tensor([[0.02, -0.25, 0.0], [0.35, LARGE_EFFECT / 2, 0.6]])
    effects = HeadEffects("patching", 1, 2, shares)
    rows = {(row[0], row[1]): row for row in figures.summary_table(summaries, effects)}
    label, effect = figures.SUMMARY_HEADERS.index("label"), figures.SUMMARY_HEADERS.index("effect")
    by_head = {(s.layer, s.head): s.label for s in summaries}
    assert rows[1, 0][label] == f"{by_head[1, 0]} · 35% of the effect" and rows[1, 0][effect] == "+35%"
    assert rows[0, 1][label] == f"{by_head[0, 1]} · -25% of the effect"  # a large effect either way
    assert rows[1, 1][label] == by_head[1, 1] and rows[1, 1][effect] == "+5%"  # small: the column alone
    assert [row[label] for row in figures.summary_table(summaries)] == [s.label for s in summaries]
    assert all(row[effect] == "-" for row in figures.summary_table(summaries))  # no effects measured
    board = figures.summary_figure(summaries, effects)
    text = board.data[0].text
    assert "<b>+35%</b>" in text[1][0] and "<b>+60%</b>" in text[1][2] and "<b>" not in text[1][1]
    assert "Effect on the answer (patching): +5%" in board.data[0].customdata[1][1]
    assert effects.ranked() == [(1, 2, pytest.approx(0.6)), (1, 0, pytest.approx(0.35)), (0, 1, pytest.approx(-0.25))]


def test_summary_table_and_board_show_every_head():
    maps = torch.softmax(torch.randn(2, 3, 6, 6), -1) * torch.ones(6, 6).tril()
    maps = maps / maps.sum(-1, keepdim=True)
    summaries = summarize_heads(maps, [1, 2, 3, 4, 5, 6])
    rows = figures.summary_table(summaries)
    assert [row[:2] for row in rows] == [[layer, head] for layer in range(2) for head in range(3)]
    induction = figures.SUMMARY_HEADERS.index("induction")
    assert all(row[induction] == "-" for row in rows)  # no repeats: not measured
    assert all(row[induction - 1] != "-" for row in rows)  # fixed-offset: measured
    board = figures.summary_figure(summaries)
    assert board.data[0].z.shape == (2, 3)
