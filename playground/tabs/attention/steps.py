"""Inside one head, step by step: the arithmetic of one head for one query token of the analysed
text, in the model's own numbers (q, every k, q.k, the division by the square root of d, the mask,
the softmax, the values), with what the weights would be without the scaling and without the mask.
Api `/head_steps`; once shown, the steps follow the analysis's pickers.
Never imports another section: it reads the analysis's pickers through the layout's `Page`.
"""

from __future__ import annotations

import math

import gradio as gr

from core.interventions import HeadSteps, head_steps
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures import attention as figures
from playground.figures import inside
from playground.tabs.attention.common import Analyses, Page, md, plot

# What a new analysis clears, by output (`build` returns the components under these names).
CLEARED = {"note": "", "table": None, "vectors": None}
STEPS_HELP = (
    "The arithmetic of one head for one query token, in the model's own numbers: pick the **Layer**, "
    "**Head** and **Query token** above (the steps follow them once shown). Cells are rounded; hover for "
    "the exact value. The toggles add what the weights would be without the division by √d, and without "
    "the causal mask."
)


class Handlers:
    """Show the steps, and follow the pickers once they are shown."""

    def __init__(self, ctx: AppContext, analyses: Analyses) -> None:
        self.ctx, self.analyses = ctx, analyses

    def head_steps(self, layer, head, query, without_scale, without_mask, request: gr.Request):
        """One head's arithmetic for one query token of the analysed text: a note, the table of
        scores and weights (the toggles add the weights without sqrt(d), without the mask), the vectors."""
        with self.analyses.current(request) as (_, analysis, reading):
            layer, head = self.analyses.layer_head(analysis, layer, head)
            query = validate.integer(query, "Query token", 0, len(analysis.ids) - 1)
            without_scale = validate.flag(without_scale, "Without ÷√d")
            without_mask = validate.flag(without_mask, "Without the mask")
            with validate.user_errors():
                steps = head_steps(reading.model, analysis.ids, layer, head, query)
            analysis.results["steps"] = steps
        return (
            _steps_note(steps, analysis.labels, without_scale, without_mask),
            inside.steps_table(steps, analysis.labels, without_scale=without_scale, without_mask=without_mask),
            inside.steps_vectors(steps, analysis.labels),
        )

    def follow_pickers(self, layer, head, query, without_scale, without_mask, request: gr.Request):
        """The pickers moved: redraw the steps if they are shown for this analysis, else nothing
        (and nothing while the session trains: moving a picker must not raise a message about it)."""
        session = self.ctx.registry.get(request)
        analysis = session.attention
        if analysis is None or "steps" not in analysis.results or not analysis.of(session.reading) or session.busy:
            return gr.skip(), gr.skip(), gr.skip()
        return self.head_steps(layer, head, query, without_scale, without_mask, request)

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        return {"head_steps": results["steps"].to_dict()} if "steps" in results else {}


def _steps_note(steps: HeadSteps, labels: list[str], without_scale: bool, without_mask: bool) -> str:
    """What the step-by-step table shows, as the model was built (scaled or not, masked or not, its
    positions), and what each toggle changes."""
    names = figures.axis_labels(labels, [(t, t + 1) for t in range(len(labels))])
    d, query, weight = steps.q.numel(), steps.query, steps.weights.max().item()
    strongest, last = md(names[int(steps.weights.argmax())]), query == len(labels) - 1
    scaling = (f"the products are divided by √d = {math.sqrt(d):.3g}" if steps.scale_attention else
               "the products are **not** divided by √d (this model was built without the scaling)")
    if steps.causal:
        mask = "the keys after the query get -∞ (the mask) and the softmax turns the rest into weights"
    else:
        seen = (", though no token comes after the last one" if last else ": the query sees the tokens after it "
                f"too, {steps.weights[query + 1:].sum().item():.3f} of its weight is on them")
        mask = ("**nothing hides the keys after the query** (this model was built without the causal mask"
                f"{seen}) and the softmax turns the scores into weights")
    lines = [f"**Layer {steps.layer}, head {steps.head}, query {md(names[query])}**, head size d = {d}. "
             f"The query's vector q meets every key k (q·k), {scaling}, {mask}: the "
             f"**softmax** column is row {md(names[query])} of the head's heatmap above (largest: {weight:.3f} "
             f"on {strongest}). The head's output is the values added up with these weights."]
    lines.append(_positions_line(steps))
    if steps.out_of_window:
        lines.append(f"**Sliding window:** the {steps.out_of_window} earliest key(s) get -∞"
                     f"{' like the future' if steps.causal else ''}: this layer sees only the last "
                     f"{query + 1 - steps.out_of_window} tokens up to the query.")
    if without_scale:
        lines.append(_without_scale_line(steps, d, weight))
    if without_mask:
        lines.append(_without_mask_line(steps, names, last))
    return "  \n".join(lines)


def _positions_line(steps: HeadSteps) -> str:
    """Where q and k got their positions from, as the model was built."""
    if steps.position == "rope":
        return ("**Rotary positions (RoPE):** before q meets k, each is turned by its own position: every pair "
                "of channels (i, i + d/2) by an angle of position × a frequency, fast in the first pairs and slow "
                "in the last (compare the panels before and after RoPE below). The turns cancel up to their "
                "difference, so q·k depends on how far back a key is, not on where the text starts.")
    if steps.position == "alibi":
        slope = "" if steps.alibi_slope is None else f" = {steps.alibi_slope:.4g}"
        return (f"**ALiBi:** no position is added to any vector; instead each score loses the head's slope "
                f"m{slope} times the distance to the key (the **ALiBi −m·dist** column), so far keys count "
                "less. Each head has its own slope: some look near, some far.")
    if steps.position == "none":
        order = ("only the mask lets order leak in" if steps.causal else
                 "and without the mask nothing does: the head sees a bag of tokens")
        return ("**No positions** (this model was built without them): nothing in q or k says where a token sits, "
                f"so two copies of a token get the same score; {order}.")
    return ("**Positions:** each token's vector had its position's learned embedding added at the input, so q and "
            "k carry where their tokens sit as well as what they are.")


def _without_scale_line(steps: HeadSteps, d: int, weight: float) -> str:
    if not steps.scale_attention:
        return ("**Without ÷√d** is how this model already works: that column equals the softmax. Its scores are "
                f"{math.sqrt(d):.3g} times larger than a scaled head's, so its softmax is sharper and saturates sooner.")
    return (f"**Without ÷√d** the scores would be {math.sqrt(d):.3g} times larger and the largest "
            f"weight {steps.weights_unscaled.max().item():.3f} instead of {weight:.3f}: the softmax "
            "sharpens, and in a wide head it saturates on one key, where learning through it stalls.")


def _without_mask_line(steps: HeadSteps, names: list[str], last: bool) -> str:
    query = steps.query
    if not steps.causal:
        same = ("differs from the softmax only where the sliding window hides keys" if steps.out_of_window
                else "equals the softmax")
        return f"**Without the mask** is how this model already works: it has no causal mask, so that column {same}."
    if last:
        return ("**Without the mask** nothing changes for the last token: no token comes after it. "
                "Pick an earlier query token to see the future leak in.")
    future = steps.weights_unmasked[query + 1:].sum().item()
    later = f"later tokens (#{query + 1} to #{len(names) - 1})"
    if future < 0.0005:
        return (f"**Without the mask** {md(names[query])} would still put almost nothing ({future:.1e}) "
                f"on {later}: this head's scores keep it on the past here, but only the mask "
                "guarantees it, in training too.")
    return (f"**Without the mask** {md(names[query])} would put {future:.3f} of its attention on "
            f"{later}: it would see the future, which it cannot do while it writes a text, and "
            "training would teach it to copy the answer.")


def build(ctx: AppContext, handlers: Handlers, page: Page) -> dict[str, gr.Component]:
    with gr.Accordion("Inside one head: step by step", open=False, elem_id="steps-section"):
        gr.Markdown(STEPS_HELP)
        with gr.Row(equal_height=True):
            without_scale = gr.Checkbox(label="Also without ÷√d", elem_id="steps-no-scale")
            without_mask = gr.Checkbox(label="Also without the mask", elem_id="steps-no-mask")
            run = gr.Button("Show the steps", variant="primary", elem_id="steps-run")
        shown = dict(note=gr.Markdown(elem_id="steps-note"), table=plot("Step by step", "steps-table"),
                     vectors=plot("The vectors", "steps-vectors"))
    inputs, outputs = [page.layer, page.head, page.query, without_scale, without_mask], list(shown.values())
    page.head_picked.success(handlers.follow_pickers, inputs, outputs, api_name="attention_steps_follow_table",
                             api_visibility="private", **ctx.heavy("attention"))
    gr.on([page.layer.input, page.head.input, page.query.input], handlers.follow_pickers, inputs, outputs,
          api_name="attention_steps_follow", api_visibility="private", **ctx.heavy("attention"))
    gr.on([run.click, without_scale.input, without_mask.input], handlers.head_steps, inputs, outputs,
          api_name="head_steps", **ctx.heavy("attention"))
    return shown
