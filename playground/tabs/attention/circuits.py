"""A head's QK and OV circuits, token by token: what a query token looks for in a key token, and
what attending to a token writes into the logits, with the head's copying score. For models of a
small vocabulary (a trained-here model; not GPT-2). Api `/circuits`.
Never imports another section.
"""

from __future__ import annotations

import gradio as gr

from core.attribution import MAX_CIRCUIT_VOCAB, circuits
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures import why
from playground.tabs.attention.common import Analyses, Page, head_name, plot

# What a new analysis clears, by output (`build` returns the components under these names).
CLEARED = {"note": "", "qk": None, "positional": None, "ov": None}
COPYING = 0.5  # a copying score from here on: the head mostly raises the logits of the tokens it attends to
CIRCUITS_HELP = (
    "The head picked above (**Layer**, **Head**) as two token x token matrices, read from its weights on the "
    "direct path (each token's embedding alone, through the layer's norm and the head's biases; Elhage et al. "
    "2021). **QK**: the score a query token gives a key token before the softmax when the stream holds the token "
    "alone: in layer 0 of a model without learned positions, exactly the head's score before its positions act. "
    "Learned positions are added to the token before layer 0's norm, so there the QK and positional circuits are "
    "two views of what the head looks for, not its scores. (TransformerLens's QK circuit also leaves out the "
    "norm, the biases and the ÷√d.) **OV**: what attending to a token adds to "
    f"each logit. For vocabularies of at most {MAX_CIRCUIT_VOCAB} tokens."
)


class Handlers:
    """A head's circuits."""

    def __init__(self, ctx: AppContext, analyses: Analyses) -> None:
        self.ctx, self.analyses = ctx, analyses

    def circuits(self, layer, head, request: gr.Request):
        """A note with the copying score; the QK circuit, the positional one (or none), the OV circuit."""
        with self.analyses.current(request) as (_, analysis, reading):
            layer, head = self.analyses.layer_head(analysis, layer, head)
            vocab = reading.model.config.vocab_size
            if vocab > MAX_CIRCUIT_VOCAB:  # GPT-2, SmolLM2: a note, not an error over three empty plots
                return (f"This model's vocabulary has {vocab:,} tokens: circuits are drawn for at most "
                        f"{MAX_CIRCUIT_VOCAB} (a token x token matrix of {vocab:,}² cells is neither legible nor "
                        "cheap). Train a model here to see its circuits."), None, None, None
            with validate.user_errors():
                circuit = circuits(reading.model, layer, head)
            analysis.results["circuits"] = circuit
            tokens = [reading.tokenizer.token_label(token) for token in range(reading.model.config.vocab_size)]
        qk, ov = why.circuit_figures(circuit, tokens)
        positional = None if circuit.positional_qk is None else why.positional_figure(circuit)
        return _note(circuit, reading.model.config.position), qk, positional, ov

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        mine = {}
        if "circuits" in results:
            circuit = results["circuits"]
            mine["circuits"] = {
                "head": head_name(circuit.layer, circuit.head), "qk": circuit.qk.tolist(), "ov": circuit.ov.tolist(),
                "positional_qk": None if circuit.positional_qk is None else circuit.positional_qk.tolist(),
                "copying_score": circuit.copying_score,
            }
        return mine


def _note(circuit, position: str) -> str:
    name, score = head_name(circuit.layer, circuit.head), circuit.copying_score
    if score >= COPYING:
        reading = ("it **copies**: attending to a token raises that token's own logit, so its OV circuit is a "
                   "bright diagonal, as a copy task's heads have")
    elif score <= -COPYING:
        reading = "it **suppresses** what it attends to: its OV circuit's diagonal is blue"
    else:
        reading = "it neither copies nor suppresses on the whole"
    places = {"learned": "The positional QK circuit, below it, is what a query position looks for by position alone. "
                         "Layer 0 reads the norm of token plus position, so neither circuit, nor their sum, is its "
                         "score: they show what the head looks for by token and by place.",
              "rope": "With rotary positions the QK circuit is the score at distance 0; RoPE turns it with the distance.",
              "alibi": "With ALiBi each score also loses the head's slope times the distance.",
              "none": "This model has no positions: the QK circuit is all its attention reads."}
    return (f"**{name}**'s copying score is **{score:+.2f}** (the OV circuit's eigenvalues summed over the sum of "
            f"their sizes: +1 copies, −1 suppresses): {reading}. {places[position]}")


def build(ctx: AppContext, handlers: Handlers, page: Page) -> dict[str, gr.Component]:
    with gr.Accordion("A head's circuits: QK and OV", open=False, elem_id="circuits-section"):
        gr.Markdown(CIRCUITS_HELP)
        run = gr.Button("Show the circuits of the head picked above", variant="primary", elem_id="circuits-run")
        shown = dict(note=gr.Markdown(elem_id="circuits-note"), qk=plot("QK circuit", "circuits-qk"),
                     positional=plot("Positional QK circuit", "circuits-positional"),
                     ov=plot("OV circuit", "circuits-ov"))
    run.click(handlers.circuits, [page.layer, page.head], list(shown.values()), api_name="circuits",
              **ctx.heavy("attention"))
    return shown
