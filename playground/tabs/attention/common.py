"""What every section of the Attention tab shares: the sessions' analyses as the sections read them
(`Analyses`; `Analysis` is declared with the session's state in `playground.sessions`), what the export
reads of each tool (`Tool`), the page the tools follow (`Page`), the heads' summary (drawn by the analysis,
redrawn by patching), and small helpers (the model read, a head's name, a Markdown-safe token, a plot
with PNG and SVG buttons).

A section is one module with a `Handlers` class, made with what it depends on (the app's context and
the `Analyses`; the export also the tools whose results it gathers), and a `build` function; `layout`
makes every section's handlers (`AttentionHandlers`) and lays the sections out.
Never imports a section or the layout: they build on this module.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import gradio as gr

from core.attention import HeadSummary
from core.attribution import LARGE_EFFECT, MIN_PATCH_GAP, HeadEffects
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures import attention as figures
from playground.gradio_internals import Dependency
from playground.sessions import Analysis, Session, TrainedModel

STALE = "The model has changed since this analysis: press Analyse again first."
FIGURE_FORMATS = ("png", "svg")


def reading_of(session: Session) -> TrainedModel:
    """What the tab reads: the session's own model, or a pretrained one when the picker says so."""
    if session.reading is None:
        raise gr.Error("There is no model yet: train one on the Train tab (or upload a checkpoint), "
                       "or pick a pretrained model above.")
    return session.reading


def head_name(layer: int, head: int) -> str:
    return f"L{layer} H{head}"


def md(text: str) -> str:
    """Text from the user (a token) shown literally in Markdown."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~&])", r"\\\1", text)


def summary_views(analysis: Analysis, tokenizer: Tokenizer) -> tuple:
    """The heads' summary as the page shows it: (the board, the table's rows, the note under the board)."""
    effects = analysis.effects
    return (figures.summary_figure(analysis.summaries, effects), figures.summary_table(analysis.summaries, effects),
            effects_note(effects, analysis.summaries, tokenizer))


def effects_note(effects: HeadEffects | None, summaries: list[HeadSummary], tokenizer: Tokenizer) -> str:
    """The sentence under the summary: labels read patterns, effects read causes; how the effects were
    measured, on which answer, and the heads with the largest."""
    lead = ("**Labels read patterns, effects read causes.** A label says where a head looks on this text; "
            "its effect says how much of the answer it makes")
    if effects is None:
        return (f"{lead}: none here (the model's two likeliest next tokens are within {MIN_PATCH_GAP:g} of a logit, "
                "or it has no residual stream to split).")
    answer, other = (md(tokenizer.token_label(token)) for token in (effects.target, effects.alternative))
    how = {
        "attribution": f"each head's direct share of the model's lead of **{answer}** over **{other}** at the last "
                       "token (direct logit attribution; **Patch** this text against a corrupted one to measure "
                       "causes)",
        "patching": f"the share of **{answer}**'s lead over **{other}** that each head's clean output brings back "
                    "into the corrupted run (activation patching)",
    }[effects.method]
    labels = {(s.layer, s.head): s.label for s in summaries}
    largest = [f"{head_name(layer, head)} {labels[layer, head]} {share:+.0%}"
               for layer, head, share in effects.ranked()[:6]]
    found = (f"Largest: {', '.join(largest)}." if largest else
             f"No head has {LARGE_EFFECT:.0%} of it on its own.")
    return (f"{lead}: {how}. {found} A head with {LARGE_EFFECT:.0%} or more shows it beside its label, "
            "whatever the label: a 'mixed' head can carry the answer, and a clean pattern can change nothing.")


def plot(label: str, elem_id: str, **kwargs) -> gr.Plot:
    """A gr.Plot with PNG and SVG buttons: plotly draws the file in the browser, no server call. Plotly's
    own toolbar, under the buttons, is hidden (style.css: `.figure-buttons`)."""
    buttons = {fmt: gr.Button(fmt.upper(), size="sm") for fmt in FIGURE_FORMATS}
    plot = gr.Plot(label=label, elem_id=elem_id, buttons=list(buttons.values()), elem_classes="figure-buttons",
                   **kwargs)
    for fmt, button in buttons.items():
        scale = 2 if fmt == "png" else 1  # a sharp PNG; an SVG is sharp at any size
        button.click(None, js=f"""() => {{
            const plot = document.querySelector("#{elem_id} .js-plotly-plot");
            const options = {{format: "{fmt}", filename: "{elem_id}", scale: {scale}}};
            if (plot && window.Plotly) window.Plotly.downloadImage(plot, options);
        }}""", api_visibility="private")
    return plot


class Analyses:
    """The sessions' analyses as every section reads them (each section's handlers are given this):
    the last one, and the one to run a tool on, under the session's job lock with the model it shows."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def last(self, request: gr.Request) -> Analysis:
        """The session's last analysis, to redraw from (no lock: the pickers' views are cheap)."""
        analysis = self.ctx.registry.get(request).attention
        if analysis is None:
            raise gr.Error("Analyse a text first.")
        return analysis

    @staticmethod
    def layer_head(analysis: Analysis, layer, head) -> tuple[int, int]:
        n_layer, n_head = analysis.maps.shape[:2]
        return validate.integer(layer, "Layer", 0, n_layer - 1), validate.integer(head, "Head", 0, n_head - 1)

    @contextlib.contextmanager
    def current(self, request: gr.Request) -> Iterator[tuple[Session, Analysis, TrainedModel]]:
        """The session under its job lock, its analysis and the model the tab reads, which must be
        the one the analysis shows, as it is now."""
        with self.ctx.registry.job(request, "attention") as session:
            analysis, reading = session.attention, session.reading
            if analysis is None:
                raise gr.Error("Analyse a text first.")
            if not analysis.of(reading):
                raise gr.Error(STALE)
            yield session, analysis, reading


class Tool(Protocol):
    """A tool's handlers as the export reads them: what the tool found in an analysis, its part of the
    export's JSON."""

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        """The tool's results kept in `results` (`Analysis.results`) as plain JSON, by name; {} if none."""
        ...


@dataclass
class Page:
    """What the analysis lays out that the tools below it read and follow: the pickers of a head and a
    query token, and the events after which they redraw."""

    layer: gr.Dropdown
    head: gr.Dropdown
    query: gr.Dropdown
    head_picked: Dependency  # a row of the summary table opened a head in the large view
    summary: list[gr.Component]  # the heads' board, table and note (`summary_views`): patching redraws them
