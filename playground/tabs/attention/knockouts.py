"""Knock out heads: the loss on the analysed text and a greedy continuation of it with chosen heads
switched off (zeroed, or writing their mean over the text), and every head's importance, the loss
increase when it alone is off. Apis `/ablate` and `/head_importance`; a large model's importance is
cut to the server's multiply-add budget.
Never imports another section.
"""

from __future__ import annotations

import re

import gradio as gr
import torch

from core.interventions import ABLATIONS, ablate, head_importance, importance_macs, text_loss
from core.model import GPT
from core.sample import generate
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures import inside
from playground.tabs.attention.common import Analyses, Analysis, Page, head_name, plot

# What a new analysis clears, by output (`build` returns the components under these names, and `heads`,
# which a new analysis fills with its heads: `Handlers.heads_to_pick`).
CLEARED = {"note": "", "intact": "", "knocked": "", "importance": None}
# How a knocked-out head is switched off, by core's name for it (the radio shows the name).
MODE_NAMES = {"zero": "zeroed", "mean": "mean over the text's tokens"}
MODE_CHOICES = [(MODE_NAMES[mode], mode) for mode in ABLATIONS]
HEAD_NAME = re.compile(r"L(\d{1,4}) H(\d{1,4})")  # "L1 H0": layer 1, head 0, as the grid titles them
CONTINUATION_TOKENS = 40  # greedy tokens written with and without a knock-out (and at most max_new_tokens)
KNOCKOUT_HELP = (
    "Switch heads off and see what the model loses: the loss on the analysed text before and after, "
    "and how it continues the text. The map shows every head's importance at once: the loss increase "
    "when that head **alone** is switched off (red: the model needs it; blue: it does better without)."
)
MODE_HELP = ("zeroed: the head writes nothing. Mean: it writes its average over the text's tokens at "
             "every token, so what it writes everywhere stays and only what depends on the token goes.")


class Handlers:
    """Knock out, head importance, and the heads a new analysis offers to switch off."""

    def __init__(self, ctx: AppContext, analyses: Analyses) -> None:
        self.ctx, self.analyses = ctx, analyses

    def knock_out(self, heads, mode, request: gr.Request) -> tuple[str, str, str]:
        """The loss on the analysed text with `heads` switched off, and a greedy continuation of it
        with and without them: a note and the two continuations."""
        mode = validate.choice(mode, "Mode", ABLATIONS)
        with self.analyses.current(request) as (_, analysis, reading):
            model, tokenizer = reading.model, reading.tokenizer
            off = _heads(heads, *analysis.maps.shape[:2])
            n_new = min(CONTINUATION_TOKENS, self.ctx.settings.max_new_tokens)
            with validate.user_errors():
                before = text_loss(model, analysis.ids)
                if not off:
                    analysis.results.pop("knock_out", None)
                    return (f"No head picked: the loss on the text is **{before:.4f}**. Pick heads to switch off; "
                            "the map below shows what each one is worth alone.", "", "")
                if "intact" not in analysis.results:
                    analysis.results["intact"] = _continue(model, analysis.ids, n_new)
                # a mean-ablated head writes its mean over the analysed text, fixed while the text grows
                with ablate(model, off, mode, over=analysis.ids):
                    after = text_loss(model, analysis.ids)
                    knocked = _continue(model, analysis.ids, n_new)
            intact, knocked = tokenizer.decode(analysis.results["intact"]), tokenizer.decode(knocked)
            analysis.results["knock_out"] = dict(
                heads=[head_name(*pair) for pair in off], mode=mode, loss_before=before, loss_after=after,
                continuation_tokens=n_new, continuation_intact=intact, continuation_knocked_out=knocked)
        names = ", ".join(head_name(*pair) for pair in off)
        note = (f"**{names}** {MODE_NAMES[mode]}: the loss on the analysed text goes from **{before:.4f}** to "
                f"**{after:.4f}** ({after - before:+.4f}). Below, the model continues the text greedily "
                f"(its likeliest token each time) for {n_new} tokens, with every head and without "
                f"{'this head' if len(off) == 1 else 'these heads'}.")
        return note, intact, knocked

    def importance(self, mode, request: gr.Request):
        """Every head's importance: the loss increase on the analysed text when it alone is off."""
        mode = validate.choice(mode, "Mode", ABLATIONS)
        with self.analyses.current(request) as (_, analysis, reading):
            cached = analysis.results.setdefault("importance", {})
            # A pass per head costs the model's size times the tokens: a large model's is capped to the
            # server's budget (GPT-2 gets ~16 tokens instead of 40 s of a core); a small model's never is.
            n_tokens = self._importance_tokens(reading.model.config, len(analysis.ids))
            analysis.results["importance_tokens"] = n_tokens
            if mode not in cached:  # one pass over every head; kept per mode for this analysis
                with validate.user_errors():
                    cached[mode] = head_importance(reading.model, analysis.ids[:n_tokens], mode)
            capped = "" if n_tokens == len(analysis.ids) else (
                f"The loss on the first {n_tokens} of {len(analysis.ids)} tokens: this server's budget for this model "
                "(locally, --no-caps lifts it)")
            return inside.importance_figure(cached[mode], MODE_NAMES[mode], capped)

    def _importance_tokens(self, config, n_tokens: int) -> int:
        """The most tokens (at least 2) whose importance pass fits the server's budget."""
        budget = self.ctx.settings.max_importance_gmacs * 10**9
        while n_tokens > 2 and importance_macs(config, n_tokens) > budget:
            n_tokens -= 1
        return n_tokens

    @staticmethod
    def heads_to_pick(analysis: Analysis) -> gr.Dropdown:
        """The heads of a new analysis to pick from, none picked."""
        n_layer, n_head = analysis.maps.shape[:2]
        names = [head_name(layer, head) for layer in range(n_layer) for head in range(n_head)]
        return gr.Dropdown(choices=names, value=[], multiselect=True)

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        mine = {}
        if "knock_out" in results:
            mine["knock_out"] = results["knock_out"]
        if "importance" in results:
            mine["importance"] = {mode: values.tolist() for mode, values in results["importance"].items()}
            mine["importance_tokens"] = results["importance_tokens"]  # the loss's tokens: the first n
        return mine


def _heads(value, n_layer: int, n_head: int) -> list[tuple[int, int]]:
    """The heads to switch off, from names like "L1 H0": each in the model, none twice."""
    value = [] if value is None else value
    if not isinstance(value, list):
        raise gr.Error(f"Heads must be a list of names like 'L0 H1', got {repr(value)[:40]}.")
    if len(value) > n_layer * n_head:
        raise gr.Error(f"Heads lists {len(value):,} heads; this model has {n_layer * n_head}.")
    pairs: list[tuple[int, int]] = []
    for name in value:
        match = HEAD_NAME.fullmatch(name) if isinstance(name, str) else None
        if match is None:
            raise gr.Error(f"Heads: each is a name like 'L0 H1', got {repr(name)[:40]}.")
        pair = int(match[1]), int(match[2])
        if pair[0] >= n_layer or pair[1] >= n_head:
            raise gr.Error(f"Heads: this model has no {name} (layers 0 to {n_layer - 1}, heads 0 to {n_head - 1}).")
        if pair in pairs:
            raise gr.Error(f"Heads: {name} is listed twice.")
        pairs.append(pair)
    return sorted(pairs)


def _continue(model: GPT, ids: list[int], n_new: int) -> list[int]:
    """The `n_new` tokens the model writes greedily after `ids`."""
    idx = torch.tensor([ids], device=next(model.parameters()).device)
    return generate(model, idx, n_new, temperature=0)[0, len(ids):].tolist()


def build(ctx: AppContext, handlers: Handlers, page: Page) -> dict[str, gr.Component]:
    with gr.Accordion("Knock out heads", open=False, elem_id="knockout-section"):
        gr.Markdown(KNOCKOUT_HELP)
        with gr.Row():
            heads = gr.Dropdown(label="Heads to switch off", choices=[], value=[], multiselect=True,
                                scale=2, elem_id="knockout-heads")
            mode = gr.Radio(MODE_CHOICES, value=ABLATIONS[0], label="Switched off how", info=MODE_HELP,
                            scale=2, elem_id="knockout-mode")
            run = gr.Button("Knock out", variant="primary", scale=1, elem_id="knockout-run")
        note = gr.Markdown(elem_id="knockout-note")
        with gr.Row():
            intact = gr.Textbox(label="Continuation with every head", lines=3, interactive=False,
                                elem_classes="mono", elem_id="knockout-intact")
            knocked = gr.Textbox(label="Continuation with the heads off", lines=3, interactive=False,
                                 elem_classes="mono", elem_id="knockout-knocked")
        importance = plot("Head importance", "knockout-importance")
    run.click(handlers.knock_out, [heads, mode], [note, intact, knocked], api_name="ablate",
              **ctx.heavy("attention")).success(
        handlers.importance, [mode], importance, api_name="head_importance", **ctx.heavy("attention"))
    return dict(heads=heads, note=note, intact=intact, knocked=knocked, importance=importance)
