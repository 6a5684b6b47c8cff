"""The Attention tab's analysis: every head's attention on a text, one head large, a query's head
view, and a per-head summary that tells a learner where to look.

Analyse (api `/attention`) runs the model once under the session's job lock and keeps the maps in
the session (`session.attention`); the pickers only redraw from them, so they are cheap and always
show the same model as the grid. The tools below (the other sections) read this analysis.
Never imports another section: the layout puts them together.
"""

from __future__ import annotations

import math
import weakref

import gradio as gr
import torch

from core.attention import (
    PATTERNS, PROBE_HALF_MAX, PROBE_HALF_MIN, HeadSummary, attention_maps, head_view, induction_probe,
    probe_induction, summarize_heads,
)
from core.attribution import head_effects, logit_attribution
from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import token_labels
from playground import validate
from playground.context import AppContext
from playground.figures import attention as figures
from playground.gradio_internals import Dependency
from playground.tabs.attention.common import Analyses, Analysis, Page, md, plot, reading_of, summary_views

EXAMPLES = [
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "qwhzbkad|qwhzbkad",  # the copy task: the second half looks back 8, by content or by position
    # The induction task's line, then the same with its second half shuffled: an induction head follows
    # the letters, a head that counts from the line's start (the induction-rope preset) keeps its diagonal.
    "abcdefg|abcdefg\nabcdefg|gcaebfd",
    "abcdefgh>hgfedcba",
    "38152706=01235678",
    "111101111011110",
    # For GPT-2: the indirect-object sentence of Wang et al. (2022), "Interpretability in the wild". GPT-2
    # small answers " Mary", and heads in its layers 9 and 10 (the "name movers") look from "to" at " Mary".
    "When Mary and John went to the store, John gave a drink to",
]


class Handlers:
    """Analyse, the pickers, the large view and the head view, and the text buttons."""

    def __init__(self, ctx: AppContext, analyses: Analyses) -> None:
        self.ctx, self.analyses = ctx, analyses

    def analyse(self, text: str, request: gr.Request):
        """Run the model on `text` and read every attention head; the analysis tools (head_steps, ablate,
        head_importance, logit_lens, logit_attribution, patch, circuits) then work on this text.

        A text longer than the model (or this server) can take is cut to its first tokens and
        the status says so: a built-in example must not fail on a short-context model.

        Returns:
            (status, every layer x head as a heatmap grid, the heads' summary chart and table naming
            each head's pattern and its effect on the next token, the layer and head pickers, the large view
            of one head, the head view and its note: where the query looks most in each head, and the note
            under the summary: labels read patterns, effects read causes).
        """
        settings = self.ctx.settings
        text = validate.text(text, "Text", settings.max_prompt_chars, cap=settings.cap_hint("max_prompt_chars"))
        with self.ctx.registry.job(request, "attention") as session:
            reading = reading_of(session)
            model, tokenizer = reading.model, reading.tokenizer
            with validate.user_errors():
                all_ids = tokenizer.encode(text)
            if len(all_ids) < 2:
                raise gr.Error("The text has fewer than 2 tokens; attention needs at least 2 to choose between.")
            ids = all_ids[:self._token_limit(model)]
            with validate.user_errors():
                maps = attention_maps(model, ids)  # (L, H, T, T)
                summaries = summarize_heads(maps, ids, probe_induction(model))
                # what each head does to the next token's lead over the runner-up, beside its pattern
                effects = head_effects(logit_attribution(model, ids)) if model.config.use_residual else None
            analysis = Analysis(ids, token_labels(tokenizer, ids), maps.half(), summaries,
                                weakref.ref(reading), reading.step, effects)
            session.attention = analysis
        group = model.config.n_head // model.config.kv_heads  # query heads per key/value head
        notes = [self._cut_note(len(all_ids), len(ids), model.config.max_length), _past_training(model.config, len(ids))]
        return self._render(analysis, "  \n".join(note for note in notes if note), group, tokenizer)

    def _token_limit(self, model: GPT) -> int:
        """The most tokens an analysis takes: what the model can read (learned positions stop at the
        context; computed ones do not), and this server's cap."""
        return min(model.config.max_length or math.inf, self.ctx.settings.max_attention_tokens)

    def _cut_note(self, n_tokens: int, kept: int, max_length: int | None) -> str:
        """Why a text was cut, for the status; empty when it was not."""
        if kept == n_tokens:
            return ""
        if kept == max_length:
            why = f"this model's context is {kept} tokens, as far back as it can attend."
        else:
            why = f"this server shows at most {kept}. {self.ctx.settings.cap_hint('max_attention_tokens')}"
        return f"Kept the first {kept} of the text's {n_tokens} tokens: {why}"

    def _render(self, analysis: Analysis, cut_note: str, group: int, tokenizer):
        maps = analysis.weights()
        n_layer, n_head, n_tokens, _ = maps.shape
        query = n_tokens - 1  # the last token: the one whose next token the model predicts
        standouts = _standouts(analysis)  # open the most distinctive head, not an arbitrary first one
        layer, head = (standouts[0].layer, standouts[0].head) if standouts else (0, 0)
        board, table, effects_note = summary_views(analysis, tokenizer)
        return (
            _status(analysis, cut_note),
            figures.heatmap_grid(maps, analysis.labels, group=group),
            board,
            table,
            gr.Dropdown(choices=[(f"Layer {i}", i) for i in range(n_layer)], value=layer),
            gr.Dropdown(choices=[(f"Head {i}", i) for i in range(n_head)], value=head),
            gr.Dropdown(choices=[(name, i) for i, name in enumerate(figures.axis_labels(
                analysis.labels, [(t, t + 1) for t in range(n_tokens)]))], value=query),
            figures.head_heatmap(maps[layer, head], analysis.labels, layer, head),
            *self._head_view(analysis, layer, query),
            effects_note,
        )

    def show_head(self, layer, head, request: gr.Request):
        """The large view of one head of the last analysis."""
        analysis = self.analyses.last(request)
        layer, head = self.analyses.layer_head(analysis, layer, head)
        return figures.head_heatmap(analysis.weights()[layer, head], analysis.labels, layer, head)

    def show_query(self, layer, query, request: gr.Request):
        """The head view of one query token in one layer of the last analysis, and its note."""
        analysis = self.analyses.last(request)
        layer, _ = self.analyses.layer_head(analysis, layer, 0)
        query = validate.integer(query, "Query token", 0, len(analysis.ids) - 1)
        return self._head_view(analysis, layer, query)

    @staticmethod
    def _head_view(analysis: Analysis, layer: int, query: int) -> tuple:
        """(figure, note): where `query` looks in each head of `layer`; the note says it in words (the
        figure's text equivalent): the key each head weighs most."""
        weights = head_view(analysis.weights(), query)[layer]  # (H, T)
        names = figures.axis_labels(analysis.labels, [(t, t + 1) for t in range(len(analysis.labels))])
        strongest = ", ".join(f"{md(names[key])} in head {h} ({float(weights[h, key]):.2f})"
                              for h, key in enumerate(weights.argmax(-1).tolist()))
        note = f"**Head view**, layer {layer}: {md(names[query])} looks most at {strongest}."
        return figures.head_view(weights, analysis.labels, query, layer), note

    def select_head(self, evt: gr.SelectData, request: gr.Request):
        """A click on a row of the summary table opens that head in the large view."""
        analysis = self.analyses.last(request)
        row = evt.row_value or [None, None]  # the clicked row's values (layer, head first), even if sorted
        layer, head = self.analyses.layer_head(analysis, row[0], row[1])
        return layer, head, self.show_head(layer, head, request)

    def last_text(self, request: gr.Request) -> str:
        """The session's last generated text, cut to its last tokens that fit the context."""
        session = self.ctx.registry.get(request)
        if not session.last_text:
            raise gr.Error("Nothing generated yet: generate some text on the Generate tab first.")
        reading = reading_of(session)
        model, tokenizer = reading.model, reading.tokenizer
        limit = self._token_limit(model)
        with validate.user_errors():
            ids = tokenizer.encode(session.last_text)
        if len(ids) <= limit:
            return session.last_text
        gr.Info(f"Kept the last {limit} of {len(ids)} tokens: the most the model (or this server) can look at.")
        return tokenizer.decode(ids[-limit:])

    def probe(self, request: gr.Request) -> str:
        """A fresh repeated random-token text, the standard test for induction heads, no longer than the
        model's context."""
        session = self.ctx.registry.get(request)
        reading = reading_of(session)
        model, tokenizer = reading.model, reading.tokenizer
        # within the context the model trained on (computed positions read further, but not as trained),
        # and a random length too: a head that looks back a fixed distance matches only one of them
        fits = min(model.config.block_size, self._token_limit(model))
        longest = max(PROBE_HALF_MIN, min(fits // 2, PROBE_HALF_MAX))
        half = int(torch.randint(max(PROBE_HALF_MIN, longest // 2), longest + 1, (1,), generator=session.generator))
        seed = int(torch.randint(2**31, (1,), generator=session.generator))
        ids = induction_probe(model.config.vocab_size, half, seed=seed)
        return tokenizer.decode(ids)

    def model_changed(self, request: gr.Request) -> str:
        """The status once the model read changed: the analysis on screen is stale, unless it is already of
        the new model (an Analyse pressed right after the change may finish first: its status stays). The
        status is never blanked: this event may arrive after an analysis that started later."""
        session = self.ctx.registry.peek(request)
        if session is None or session.attention is None or session.attention.of(session.reading):
            return gr.skip()  # nothing on screen to mark, or the analysis shown is of the new model already
        return "The model has changed since this analysis: press **Analyse** to see its attention now."


def _standouts(analysis: Analysis) -> list[HeadSummary]:
    """Up to 4 heads with a named pattern, strongest first."""
    named = (s for s in analysis.summaries if s.label in PATTERNS)
    return sorted(named, key=lambda s: s.score, reverse=True)[:4]


def _past_training(config: GPTConfig, n_tokens: int) -> str:
    """What happens past the context the model trained on, by its position scheme ('' within it)."""
    trained = config.block_size
    if n_tokens <= trained:
        return ""
    past = f"⚠️ **Past its training length:** this model trained on {trained} tokens at a time; tokens {trained} to {n_tokens - 1} "
    if config.window is not None:  # the form keeps the window within the context
        return past + (f"still see only the last {config.window} keys, as in training: no query reaches further "
                       "back than it learned to, so the patterns hold past that point (a reason Mistral slides a window).")
    if config.position == "rope":
        what = ("meet keys further back than any it saw: RoPE turns them by angles it never paired in training. "
                "Heads that look near usually keep their pattern; heads that look far often blur or lock onto "
                "the wrong place. Compare a head's rows before and after that point.")
    elif config.position == "alibi":
        what = ("get the same penalty per token of distance, only more of it: far keys fade as they did in "
                "training, which is why ALiBi was made (its paper trained on 1,024 tokens and read 2,048 "
                "with no loss of quality). Expect the same patterns, reaching no further back.")
    else:  # no positions: only the causal mask tells tokens apart, if the model has one
        order = ("without positions only the mask orders the tokens" if config.causal else
                 "it has neither positions nor a causal mask, so nothing orders the tokens")
        what = (f"look the same to it: {order}, but each query now averages over more keys than in training, "
                "so its attention spreads thinner.")
    return past + what


def _status(analysis: Analysis, cut_note: str) -> str:
    """What was analysed and which heads stand out, so a learner knows where to look first.

    Every label here is a summary's label, the same the board and the table show.
    """
    n_layer, n_head, n_tokens, _ = analysis.maps.shape
    lines = [f"**{n_tokens} tokens**, {n_layer} layer(s) x {n_head} head(s)."]
    if cut_note:
        lines.append(cut_note)
    standouts = _standouts(analysis)
    if standouts:
        lines.append("Heads to look at first (the strongest is open below): " + ", ".join(
            f"L{s.layer} H{s.head} {s.label} ({s.score:.2f})" for s in standouts) + ".")
    lines.append(_induction_line(analysis.summaries))
    return "  \n".join(lines)


def _induction_line(summaries: list[HeadSummary]) -> str:
    """Which heads are induction heads: the verdict of the probe, whatever this text shows."""
    if summaries[0].probe_induction is None:
        return "Induction untested: this model's context is too short for the probe (random tokens written twice)."
    found = [s for s in summaries if s.induction_head]
    watch = "**Induction probe** writes such a text to watch"
    if found:
        heads = ", ".join(f"L{s.layer} H{s.head} ({s.probe_induction:.2f})" for s in found)
        return f"Induction heads, by the probe (random tokens written twice; {watch}): {heads}."
    return (f"No induction head: no head past layer 0 follows the repeats in random tokens written twice "
            f"({watch}; the table's **probe** column has each head's score).")


def build(ctx: AppContext, handlers: Handlers) -> tuple[Page, Dependency]:
    """The text, the buttons, the status, the figures and the table; (the page the tools read, the
    event of a finished analysis)."""
    gr.Markdown(
        "Type a text in the model's vocabulary (or take the last generated text) and press **Analyse**. "
        "Each heatmap row is a token looking back (query); each column a token it can see (key). "
        "Hover for exact weights. **Induction probe** writes fresh random tokens twice: a true induction "
        "head lights up on any such text, while a head that only looks back a fixed distance does not."
    )
    with gr.Row():
        text = gr.Textbox(label="Text to analyse", lines=3, max_lines=8, scale=4, elem_id="attention-text",
                          placeholder="A text in the model's vocabulary (Shift+Enter analyses it)",
                          max_length=ctx.settings.max_prompt_chars)
        with gr.Column(scale=1, min_width=200):
            analyse = gr.Button("Analyse", variant="primary", elem_id="attention-run")
            last = gr.Button("Use last generated text", size="sm")
            probe = gr.Button("Induction probe", size="sm")
    gr.Examples(EXAMPLES, inputs=text, label="Examples (each needs a model whose vocabulary has its characters; "
                "one longer than the model's context is cut to fit; the last is for GPT-2)")
    status = gr.Markdown(elem_id="attention-status")
    summary_plot = plot("What each head does", "attention-summary")
    summary_note = gr.Markdown(elem_id="attention-summary-note")
    grid = plot("Every layer x head", "attention-grid")
    with gr.Row():
        layer = gr.Dropdown(label="Layer", choices=[("Layer 0", 0)], value=0, scale=1)
        head = gr.Dropdown(label="Head", choices=[("Head 0", 0)], value=0, scale=1)
        query = gr.Dropdown(label="Query token (head view)", choices=[("#0", 0)], value=0, scale=2)
    with gr.Row():
        large = plot("One head, large", "attention-large")
        view = plot("Head view: where a token looks", "attention-view")
    view_note = gr.Markdown(elem_id="attention-view-note")
    with gr.Accordion("Per-head table (click a row to open that head)", open=False):
        gr.Markdown(figures.SUMMARY_LEGEND, elem_id="attention-table-legend")
        table = gr.Dataframe(headers=figures.SUMMARY_HEADERS, interactive=False, wrap=True,
                             column_widths=figures.SUMMARY_WIDTHS,
                             show_search="search", elem_id="attention-table")

    outputs = [status, grid, summary_plot, table, layer, head, query, large, view, view_note, summary_note]
    analysed = gr.on([analyse.click, text.submit], handlers.analyse, [text], outputs, api_name="attention",
                     **ctx.heavy("attention"))
    last.click(handlers.last_text, None, text, api_name="attention_last_text", **ctx.cheap())
    probe.click(handlers.probe, None, text, api_name="attention_probe", **ctx.cheap())
    gr.on([layer.input, head.input], handlers.show_head, [layer, head], large, api_name="attention_head",
          **ctx.cheap())
    gr.on([layer.input, query.input], handlers.show_query, [layer, query], [view, view_note],
          api_name="attention_query", **ctx.cheap())
    # UI-only: a table click carries nothing an API caller needs
    head_picked = table.select(handlers.select_head, None, [layer, head, large], api_name="attention_select",
                               api_visibility="private", **ctx.cheap())
    ctx.follow_model(handlers.model_changed, [], [status])
    return Page(layer, head, query, head_picked, [summary_plot, table, summary_note]), analysed
