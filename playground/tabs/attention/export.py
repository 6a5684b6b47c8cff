"""Export: the attention weights of the analysed text as `.npy` (and `.csv` while not too large) and
the analysis as `.json` with what every tool has shown (each tool's handlers, given to the export's,
hand it their part: `exported`).
Files are named by the app, in a folder named by the server's id for the session. Api `/attention_export`.
Never imports another section: the tools' results reach the JSON through the handlers it is given.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd

from core.attention import attention_maps
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.sessions import Session, TrainedModel
from playground.tabs.attention.common import Analyses, Analysis, Page, Tool

# What a new analysis clears, by output (`build` returns the components under these names).
CLEARED = {"note": "", "files": None}
MAX_CSV_ROWS = 300_000  # rows of the weights' .csv (about 12 MB); larger analyses export the .npy only
EXPORT_NAMES = {"npy": "attention-weights.npy", "csv": "attention-weights.csv", "json": "attention-analysis.json"}
EXPORT_HELP = (
    "Every figure on this tab downloads as **PNG** or **SVG** from the buttons at its top right (a heatmap's "
    "cells are an image inside the SVG). Here: the attention weights of the analysed text as `.npy` "
    "(float32, layer x head x query x key) and `.csv` (one row per layer, head, query and key at or before "
    "it), and the analysis as `.json` with what the tools above have shown."
)


class Handlers:
    """Prepare the files, in a folder of the session's own; `tools` are the handlers whose results the
    JSON gathers, each its own part (`Tool.exported`)."""

    def __init__(self, ctx: AppContext, analyses: Analyses, tools: Sequence[Tool]) -> None:
        self.ctx, self.analyses, self.tools = ctx, analyses, tools
        self.scratch = Path(tempfile.mkdtemp(prefix="attention-exports-"))  # exports to download
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)

    def export(self, request: gr.Request) -> tuple[str, list[str]]:
        """The analysis as files to download: the weights (.npy, and .csv when not too large) and
        a .json of the text, its tokens, the summaries and what the tools found. Named by the app,
        in a folder named by the server's id for the session: nothing a client sends names a path."""
        with self.analyses.current(request) as (session, analysis, reading):
            with validate.user_errors():
                maps = attention_maps(reading.model, analysis.ids).numpy()  # float32: exact, unlike the kept maps
            folder = self._folder(session)
            shutil.rmtree(folder, ignore_errors=True)  # only the latest export of a session is kept
            folder.mkdir(parents=True)
            np.save(folder / EXPORT_NAMES["npy"], maps)
            written = [folder / EXPORT_NAMES["npy"]]
            n_layer, n_head, n_tokens, _ = maps.shape
            rows = n_layer * n_head * n_tokens * (n_tokens + 1) // 2
            if rows <= MAX_CSV_ROWS:
                _weights_frame(maps, analysis.labels).to_csv(folder / EXPORT_NAMES["csv"], index=False,
                                                            float_format="%.9g")
                written.append(folder / EXPORT_NAMES["csv"])
                note = ""
            else:
                note = (f"The .csv is left out: it would have {rows:,} rows (at most {MAX_CSV_ROWS:,}). "
                        "The .npy holds every weight; a shorter text makes a smaller .csv.")
            document = _analysis_json(analysis, reading, self._found(analysis.results, reading.tokenizer))
            (folder / EXPORT_NAMES["json"]).write_text(json.dumps(document, allow_nan=False), encoding="utf-8")
            written.append(folder / EXPORT_NAMES["json"])
        return note, [str(path) for path in written]

    def _found(self, results: dict, tokenizer: Tokenizer) -> dict:
        """What the tools found in this analysis (`Analysis.results`), as plain JSON: each tool's part, in
        the tools' order."""
        return {name: value for tool in self.tools for name, value in tool.exported(results, tokenizer).items()}

    def _folder(self, session: Session) -> Path:
        """The session's export folder, named by the server's id for it (never the client's hash)."""
        return self.scratch / session.id

    def free(self, session: Session) -> None:
        shutil.rmtree(self._folder(session), ignore_errors=True)


def _weights_frame(maps: np.ndarray, labels: list[str]) -> pd.DataFrame:
    """The weights (L, H, T, T) in long format, one row per (layer, head, query, key) with key <= query
    (the keys after a query get weight 0: the mask)."""
    n_layer, n_head, n_tokens, _ = maps.shape
    query, key = np.tril_indices(n_tokens)
    heads = n_layer * n_head
    tokens = np.array(labels, dtype=object)
    return pd.DataFrame({
        "layer": np.repeat(np.arange(n_layer), n_head * len(query)),
        "head": np.tile(np.repeat(np.arange(n_head), len(query)), n_layer),
        "query": np.tile(query, heads), "key": np.tile(key, heads),
        "query_token": tokens[np.tile(query, heads)], "key_token": tokens[np.tile(key, heads)],
        "weight": maps[:, :, query, key].reshape(-1),
    })


def _analysis_json(analysis: Analysis, reading: TrainedModel, found: dict) -> dict:
    """The analysis as plain JSON: the text, its tokens, the summaries, and what the tools `found`."""
    config = reading.model.config
    return {
        "text": reading.tokenizer.decode(analysis.ids), "ids": analysis.ids, "tokens": analysis.labels,
        "model": {**{name: getattr(config, name) for name in ("n_layer", "n_head", "n_embd", "block_size",
                                                               "vocab_size")}, "step": analysis.step},
        "weights": f"{EXPORT_NAMES['npy']}: float32 (layer, head, query, key)",
        "summaries": [dataclasses.asdict(summary) for summary in analysis.summaries],
        **found,
    }


def build(ctx: AppContext, handlers: Handlers, page: Page) -> dict[str, gr.Component]:
    with gr.Accordion("Export", open=False, elem_id="export-section"):
        gr.Markdown(EXPORT_HELP)
        run = gr.Button("Prepare the files", elem_id="export-run")
        shown = dict(note=gr.Markdown(elem_id="export-note"),
                     files=gr.File(label="Files", file_count="multiple", interactive=False, elem_id="export-files"))
    run.click(handlers.export, None, list(shown.values()), api_name="attention_export", **ctx.heavy("attention"))
    return shown
