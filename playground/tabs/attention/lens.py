"""The logit lens: the residual stream after each layer read as if the model ended there (through its
final LayerNorm and output layer), so a learner sees at which depth the right next token appears.
Api `/logit_lens`.
Never imports another section.
"""

from __future__ import annotations

import gradio as gr

from core.interventions import LogitLens, logit_lens
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures import inside
from playground.tabs.attention.common import Analyses, Page, plot

# What a new analysis clears, by output (`build` returns the components under these names).
CLEARED = {"note": "", "plot": None}
LENS_TOP_K_MAX = 10  # predictions per cell in the logit lens's hover
LENS_HELP = (
    "Read the residual stream after each layer as if the model ended there (through its final LayerNorm "
    "and output layer): at which depth does the right next token appear? Rows are depths, columns positions; "
    "each cell shows the top prediction, its colour the probability of the token that really comes next. "
    "Hover for the top predictions."
)


class Handlers:
    """Show the logit lens."""

    def __init__(self, ctx: AppContext, analyses: Analyses) -> None:
        self.ctx, self.analyses = ctx, analyses

    def lens(self, top_k, request: gr.Request):
        """The logit lens on the analysed text: a note on where the answer appears, and the figure."""
        top_k = validate.integer(top_k, "Top predictions", 1, LENS_TOP_K_MAX)
        with self.analyses.current(request) as (_, analysis, reading):
            with validate.user_errors():
                result = logit_lens(reading.model, analysis.ids, top_k)
            analysis.results["lens"] = result
            top_labels = _top_labels(result, reading.tokenizer)
        return _lens_note(result), inside.lens_figure(result, analysis.labels, top_labels)

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        mine = {}
        if "lens" in results:
            lens = results["lens"]
            mine["logit_lens"] = {
                "depths": lens.depths, "top_tokens": _top_labels(lens, tokenizer),
                **{name: getattr(lens, name).tolist() for name in ("top_ids", "top_probs", "target_probs",
                                                                   "target_ranks")},
            }
        return mine


def _top_labels(result: LogitLens, tokenizer: Tokenizer) -> list[list[list[str]]]:
    """The lens's top tokens as labels: [depth][position][rank]."""
    names = {i: tokenizer.token_label(i) for i in set(result.top_ids.flatten().tolist())}
    return [[[names[i] for i in top] for top in depth] for depth in result.top_ids.tolist()]


def _lens_note(result: LogitLens) -> str:
    """At which depth the answer appears: how often the next token is the top prediction, per depth."""
    right = (result.target_ranks == 0).sum(-1).tolist()
    n = result.target_ranks.size(-1)
    counts = ", ".join(f"{depth} **{count}**" for depth, count in zip(result.depths, right))
    return (f"The token that really comes next is the top prediction at this many of the {n} positions: "
            f"{counts}. The last row is the model's own output; each row above reads the residual stream "
            "after that layer through the final LayerNorm and the output layer, as if the model stopped there. "
            "Where the count jumps, that layer brought the answer.")


def build(ctx: AppContext, handlers: Handlers, page: Page) -> dict[str, gr.Component]:
    with gr.Accordion("Logit lens", open=False, elem_id="lens-section"):
        gr.Markdown(LENS_HELP)
        with gr.Row(equal_height=True):
            top_k = gr.Slider(1, LENS_TOP_K_MAX, value=5, step=1, label="Top predictions in the hover", scale=2)
            run = gr.Button("Show the logit lens", variant="primary", scale=1, elem_id="lens-run")
        shown = dict(note=gr.Markdown(elem_id="lens-note"), plot=plot("Logit lens", "lens-plot"))
    run.click(handlers.lens, [top_k], list(shown.values()), api_name="logit_lens", **ctx.heavy("attention"))
    return shown
