"""What every section of the Attention tab shares: the base of every section's handlers (`AttentionBase`),
which keeps the session's analysis (`Analysis`, declared with the session's state in `playground.sessions`),
and small helpers (the model read, a checkbox, a head's name, a Markdown-safe token, a plot with PNG and
SVG buttons).

A section is one module with a `Handlers` class (a mixin of `AttentionBase`) and a `build` function;
`layout` mixes every section's handlers into `AttentionHandlers` and lays the sections out.
Never imports a section or the layout: they build on this module.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
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


class AttentionBase:
    """The tab's handlers as plain methods (tests call them with a session id as request): what every
    section needs. Each section adds its own handlers; `exported` gathers what each found for the export."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.scratch = Path(tempfile.mkdtemp(prefix="attention-exports-"))  # exports to download
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)

    def _analysis(self, request: gr.Request) -> Analysis:
        analysis = self.ctx.registry.get(request).attention
        if analysis is None:
            raise gr.Error("Analyse a text first.")
        return analysis

    @staticmethod
    def _layer_head(analysis: Analysis, layer, head) -> tuple[int, int]:
        n_layer, n_head = analysis.maps.shape[:2]
        return validate.integer(layer, "Layer", 0, n_layer - 1), validate.integer(head, "Head", 0, n_head - 1)

    @contextlib.contextmanager
    def _current(self, request: gr.Request) -> Iterator[tuple[Session, Analysis, TrainedModel]]:
        """The session under its job lock, its analysis and the model the tab reads, which must be
        the one the analysis shows, as it is now."""
        with self.ctx.registry.job(request, "attention") as session:
            analysis, reading = session.attention, session.reading
            if analysis is None:
                raise gr.Error("Analyse a text first.")
            if not analysis.of(reading):
                raise gr.Error(STALE)
            yield session, analysis, reading

    def _folder(self, session: Session) -> Path:
        """The session's export folder, named by the server's id for it (never the client's hash)."""
        return self.scratch / session.id

    def free(self, session: Session) -> None:
        shutil.rmtree(self._folder(session), ignore_errors=True)

    def exported(self, results: dict, tokenizer: Tokenizer) -> dict:
        """What the tools found in this analysis (`Analysis.results`), as plain JSON for the export. Each
        section that keeps a result adds its part and calls `super().exported` for the others'."""
        return {}


@dataclass
class Page:
    """What the analysis lays out that the tools below it read and follow: the pickers of a head and a
    query token, and the events after which they redraw."""

    layer: gr.Dropdown
    head: gr.Dropdown
    query: gr.Dropdown
    head_picked: Dependency  # a row of the summary table opened a head in the large view
