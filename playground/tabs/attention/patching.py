"""Activation patching: a clean text and a corrupted one of the same length; the corrupted run takes
one part of the clean run at a time (the residual stream at one layer and position, or one head's
output), and the figures show how much of the clean answer each part brings back. Api `/patch`. Where
the two answers barely differ (core.attribution.MIN_PATCH_GAP) the note says so and nothing is drawn.
Where the clean text is the text analysed, the heads' summary shows patching's shares as their effects.
Never imports another section.
"""

from __future__ import annotations

import dataclasses

import gradio as gr

from core.attribution import MIN_PATCH_GAP, first_difference, head_effects, patch, patch_macs
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures import why
from playground.tabs.attention.common import Analyses, Page, head_name, md, plot, summary_views

# What a new analysis clears, by output (`build` returns the components under these names).
CLEARED = {"note": "", "residual": None, "heads": None}
# Pairs that teach, (clean, corrupted): the same length in tokens, one change the answer depends on.
PAIRS = [
    # The copy tasks: the earlier copy's letter after "e" changed, so the copying head copies q, not f. A line
    # break first and 8 letters, as every training line of `repeat` (and many of `induction`) had them.
    ("\nabcdefgh|abcde", "\nabcdeqgh|abcde"),
    # GPT-2 and SmolLM2: the indirect-object sentence (Wang et al. 2022) with the second name swapped, so
    # the answer flips from " Mary" to " John". In GPT-2's vocabulary both texts have 14 tokens (a test checks they
    # match); a model whose tokenizer splits them unevenly keeps the copy pair (`fitting_pair`) or its own texts.
    ("When Mary and John went to the store, John gave a drink to",
     "When Mary and John went to the store, Mary gave a drink to"),
]
PATCHING_HELP = (
    "Which part carries the information from there to here? Run the **corrupted** text, but take one part from "
    "the **clean** run: the residual stream at one layer and position, or one head's output everywhere. Each "
    "cell is the share of the clean answer's lead (logit(clean answer) − logit(corrupted answer) at the last "
    "token) that the patch brings back: 1 = the clean answer back, 0 = as corrupted. Where the two texts' answers "
    f"differ by under {MIN_PATCH_GAP:g} of a logit there is too little to share out, and nothing is drawn."
)


class Handlers:
    """Patch the clean run into the corrupted one."""

    def __init__(self, ctx: AppContext, analyses: Analyses) -> None:
        self.ctx, self.analyses = ctx, analyses

    def patching(self, clean, corrupted, request: gr.Request):
        """A note on the two answers and the part that restores most; the stream and head heatmaps (none,
        and the note says why, when the corruption barely moves the answer); where the clean text is the
        text analysed and there are shares, the heads' summary (board, table, note) with them as effects."""
        limit = self.ctx.settings.max_prompt_chars
        cap = self.ctx.settings.cap_hint("max_prompt_chars")
        clean = validate.text(clean, "Clean text", limit, cap=cap)
        corrupted = validate.text(corrupted, "Corrupted text", limit, cap=cap)
        with self.analyses.current(request) as (session, analysis, reading):
            model, tokenizer = reading.model, reading.tokenizer
            clean_ids = validate.tokens(tokenizer, clean, "Clean text")
            corrupted_ids = validate.tokens(tokenizer, corrupted, "Corrupted text")
            if len(clean_ids) != len(corrupted_ids):
                raise gr.Error(f"Corrupted text must have as many tokens as the clean text: {len(corrupted_ids)} "
                               f"against {len(clean_ids)}.")
            self._check_size(model.config, len(clean_ids), first_difference(clean_ids, corrupted_ids))
            with validate.user_errors():
                model.check_length(len(clean_ids))
                result = patch(model, clean_ids, corrupted_ids)
            analysis.results["patching"] = result
            summary = (gr.skip(),) * 3
            effects = head_effects(result)
            if clean_ids == analysis.ids and effects is not None:  # the causes of the analysed text's answer
                session.attention = dataclasses.replace(analysis, effects=effects)
                summary = summary_views(session.attention, tokenizer)
            labels = [tokenizer.token_label(token) for token in clean_ids]
            answers = tuple(tokenizer.token_label(token) for token in (result.target, result.alternative))
        if not result.meaningful:
            return _too_close(result, *answers), None, None, *summary
        return _note(result, *answers), why.patching_residual(result, labels), why.patching_heads(result), *summary

    def fitting_pair(self, clean, corrupted, request: gr.Request):
        """After the model changed: while the boxes hold a built-in pair, the first built-in pair the model
        now read writes in as many tokens twice (GPT-2 splits the copy pair unevenly); typed texts stay."""
        session = self.ctx.registry.peek(request)
        if (clean, corrupted) not in PAIRS or session is None or session.reading is None:
            return gr.skip(), gr.skip()
        return next((pair for pair in PAIRS if _fits(session.reading.tokenizer, pair)), (gr.skip(), gr.skip()))

    def _check_size(self, config, n_tokens: int, first_different: int) -> None:
        """Refuse texts whose patching would pass this server's caps: tokens, and multiply-adds."""
        most = self.ctx.settings.max_attention_tokens
        if n_tokens > most:
            raise gr.Error(f"Clean text has {n_tokens:,} tokens; this server patches at most {most:,}"
                           f"{self.ctx.settings.cap_hint('max_attention_tokens')}.")
        budget = self.ctx.settings.max_importance_gmacs * 10**9
        if patch_macs(config, n_tokens, first_different) > budget:
            fits = next((n for n in range(n_tokens, 0, -1) if patch_macs(config, n, min(n - 1, first_different))
                         <= budget), 1)
            raise gr.Error(f"Clean text has {n_tokens:,} tokens; for this model this server patches at most {fits:,} "
                           "(its budget of multiply-adds; locally, --no-caps lifts it).")

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        mine = {}
        if "patching" in results:
            result = results["patching"]
            mine["patching"] = {
                "target": tokenizer.token_label(result.target), "alternative": tokenizer.token_label(result.alternative),
                "clean_difference": result.clean_difference, "corrupted_difference": result.corrupted_difference,
                "residual": None if result.residual is None else result.residual.tolist(),
                "heads": None if result.heads is None else result.heads.tolist(),
            }
        return mine


def _fits(tokenizer: Tokenizer, pair: tuple[str, str]) -> bool:
    """Whether `tokenizer` writes both texts of `pair`, in as many tokens."""
    try:
        return len(tokenizer.encode(pair[0])) == len(tokenizer.encode(pair[1]))
    except ValueError:  # a character outside the vocabulary
        return False


def _differences(result, target: str, alternative: str) -> str:
    return (f"Clean, the model prefers **{md(target)}** to **{md(alternative)}** by "
            f"**{result.clean_difference:.3f}** in logits; corrupted, by **{result.corrupted_difference:.3f}**.")


def _too_close(result, target: str, alternative: str) -> str:
    return (f"{_differences(result, target, alternative)} The corruption moves the answer by only "
            f"**{abs(result.gap):.3f}**, under {MIN_PATCH_GAP:g} of a logit. A part's share would be its small "
            "effect divided by almost nothing (a head could seem to bring back −3 times all of it), so none is "
            "drawn: change the corrupted text where the answer depends on it.")


def _note(result, target: str, alternative: str) -> str:
    cells = [(value, head_name(layer, head)) for layer, row in enumerate(result.heads.tolist())
             for head, value in enumerate(row)]
    best, name = max(cells)
    return (f"{_differences(result, target, alternative)} "
            f"Of the heads, **{name}**'s clean output brings back the most: **{best:.2f}** of the difference.")


def build(ctx: AppContext, handlers: Handlers, page: Page) -> dict[str, gr.Component]:
    with gr.Accordion("Why this token: activation patching", open=False, elem_id="patching-section"):
        gr.Markdown(PATCHING_HELP)
        with gr.Row(equal_height=True):
            clean = gr.Textbox(PAIRS[0][0], label="Clean text", lines=2, scale=2, elem_id="patching-clean")
            corrupted = gr.Textbox(PAIRS[0][1], label="Corrupted text (as many tokens)", lines=2, scale=2,
                                   elem_id="patching-corrupted")
            run = gr.Button("Patch", variant="primary", scale=1, elem_id="patching-run")
        gr.Examples([list(pair) for pair in PAIRS], inputs=[clean, corrupted], label="Pairs (the first for the copy tasks, the second "
                    "for GPT-2 and SmolLM2)", elem_id="patching-pairs")
        shown = dict(note=gr.Markdown(elem_id="patching-note"),
                     residual=plot("The residual stream", "patching-residual"),
                     heads=plot("Each head", "patching-heads"))
    run.click(handlers.patching, [clean, corrupted], list(shown.values()) + page.summary, api_name="patch",
              **ctx.heavy("attention"))
    ctx.follow_model(handlers.fitting_pair, [clean, corrupted], [clean, corrupted])
    return shown
