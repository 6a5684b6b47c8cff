"""Direct logit attribution: why the model predicts one token rather than another at the picked
query token, each head's and each feed-forward layer's direct share of the logit difference.
Api `/logit_attribution`.
Never imports another section.
"""

from __future__ import annotations

import gradio as gr

from core.attribution import logit_attribution
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures import why
from playground.tabs.attention.common import Analyses, Page, head_name, md, plot

# What a new analysis clears, by output (`build` returns the components under these names).
CLEARED = {"note": "", "heads": None, "parts": None}
ALTERNATIVE_MAX_CHARS = 40  # one token's text
ATTRIBUTION_HELP = (
    "Why this token and not another? At the **Query token** picked above, the model's prediction against "
    "an alternative (empty: its runner-up). The residual stream at the end is a sum of parts (the embeddings, "
    "each head, each feed-forward layer, the biases), so the logit difference is too: each part's **direct** "
    "share, read through the final norm with its scale frozen at this forward pass's value (as TransformerLens "
    "does). What a part does through later layers is not in its share: patching measures that."
)


class Handlers:
    """Direct logit attribution at the picked query token."""

    def __init__(self, ctx: AppContext, analyses: Analyses) -> None:
        self.ctx, self.analyses = ctx, analyses

    def attribution(self, query, alternative, request: gr.Request):
        """A note naming the prediction, the alternative and the largest shares; the head grid; the bars."""
        alternative = validate.text(alternative, "Alternative", ALTERNATIVE_MAX_CHARS, allow_empty=True)
        with self.analyses.current(request) as (_, analysis, reading):
            query = validate.integer(query, "Query token", 0, len(analysis.ids) - 1)
            tokenizer = reading.tokenizer
            other = _one_token(tokenizer, alternative) if alternative else None
            with validate.user_errors():
                parts = logit_attribution(reading.model, analysis.ids, query, alternative=other)
            analysis.results["attribution"] = parts
            target, other = (tokenizer.token_label(token) for token in (parts.target, parts.alternative))
        return (_note(parts, analysis.labels[query], target, other), why.attribution_heads(parts, target, other),
                why.attribution_parts(parts, target, other))

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        mine = {}
        if "attribution" in results:
            parts = results["attribution"]
            mine["logit_attribution"] = {
                "position": parts.position, "target": tokenizer.token_label(parts.target),
                "alternative": tokenizer.token_label(parts.alternative), "difference": parts.difference,
                "embeddings": parts.embeddings, "heads": parts.heads.tolist(),
                "feed_forward": parts.feed_forward.tolist(), "biases": parts.biases,
            }
        return mine


def _one_token(tokenizer: Tokenizer, text: str) -> int:
    """The id of `text`, which must be exactly one token of the model's vocabulary."""
    ids = validate.tokens(tokenizer, text, "Alternative")
    if len(ids) != 1:
        raise gr.Error(f"Alternative must be one token of the model's vocabulary; {text[:20]!r} is {len(ids)} tokens.")
    return ids[0]


def _note(parts, query_label: str, target: str, other: str) -> str:
    shares = [(parts.embeddings, "the embeddings"), (parts.biases, "the biases")]
    shares += [(value, head_name(layer, head)) for (layer, head), value in _cells(parts.heads)]
    shares += [(value, f"L{layer}'s feed-forward") for layer, value in enumerate(parts.feed_forward.tolist())]
    top = sorted(shares, key=lambda share: -abs(share[0]))[:3]
    named = ", ".join(f"**{name}** {value:+.3f}" for value, name in top)
    return (f"After **{md(query_label)}** the model prefers **{md(target)}** to **{md(other)}** by "
            f"**{parts.difference:.3f}** in logits. The largest direct shares: {named}. All shares add up to "
            "the difference (the last bar).")


def _cells(grid) -> list[tuple[tuple[int, int], float]]:
    return [((layer, head), value) for layer, row in enumerate(grid.tolist()) for head, value in enumerate(row)]


def build(ctx: AppContext, handlers: Handlers, page: Page) -> dict[str, gr.Component]:
    with gr.Accordion("Why this token: logit attribution", open=False, elem_id="attribution-section"):
        gr.Markdown(ATTRIBUTION_HELP)
        with gr.Row(equal_height=True):
            alternative = gr.Textbox(label="Against (one token; empty: the runner-up)", max_lines=1, scale=2,
                                     elem_id="attribution-alternative")
            run = gr.Button("Attribute", variant="primary", scale=1, elem_id="attribution-run")
        shown = dict(note=gr.Markdown(elem_id="attribution-note"),
                     heads=plot("Each head's share", "attribution-heads"),
                     parts=plot("Part by part", "attribution-parts"))
    run.click(handlers.attribution, [page.query, alternative], list(shown.values()), api_name="logit_attribution",
              **ctx.heavy("attention"))
    return shown
