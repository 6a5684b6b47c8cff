"""The Attention tab: every head's attention on a text, one head large, a query's head view,
and a per-head summary that tells a learner where to look.

Analyse (api `/attention`) runs the model once under the session's job lock and keeps the maps
in the session (`session.attention`); the pickers only redraw from them, so they are cheap and
always show the same model as the grid.

Below, the tools that look inside a head run the session's model on the analysed text, under the
same lock: the arithmetic of one head step by step (`/head_steps`), knock-outs (`/ablate`, and
`/head_importance` for every head alone), the logit lens (`/logit_lens`), and the export of the
weights and the analysis as files (`/attention_export`). They refuse once the model has changed
since the analysis: what they show must be the model the heatmaps show.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import math
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd
import torch

from core.attention import (
    PROBE_HALF_MAX, PROBE_HALF_MIN, HeadSummary, attention_maps, head_view, induction_probe, probe_induction,
    summarize_heads,
)
from core.interventions import (
    ABLATIONS, HeadSteps, LogitLens, ablate, head_importance, head_steps, importance_macs, logit_lens, text_loss,
)
from core.model import GPT
from core.sample import generate
from core.tokenizers import Tokenizer, token_labels
from playground import model_picker, validate
from playground.context import AppContext
from playground.figures import attention as figures
from playground.figures import inside
from playground.sessions import Session, TrainedModel

EXAMPLES = [
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "qwhzbkad|qwhzbkad",  # the copy task: the second half looks back 8, by content or by position
    "abcdefgh>hgfedcba",
    "38152706=01235678",
    "111101111011110",
    # For GPT-2: the indirect-object sentence of Wang et al. (2022), "Interpretability in the wild". GPT-2
    # small answers " Mary", and heads in its layers 9 and 10 (the "name movers") look from "to" at " Mary".
    "When Mary and John went to the store, John gave a drink to",
]


# How a knocked-out head is switched off, by core's name for it (the radio shows the name).
MODE_NAMES = {"zero": "zeroed", "mean": "mean over the text's tokens"}
MODE_CHOICES = [(MODE_NAMES[mode], mode) for mode in ABLATIONS]
HEAD_NAME = re.compile(r"L(\d{1,4}) H(\d{1,4})")  # "L1 H0": layer 1, head 0, as the grid titles them
CONTINUATION_TOKENS = 40  # greedy tokens written with and without a knock-out (and at most max_new_tokens)
LENS_TOP_K_MAX = 10  # predictions per cell in the logit lens's hover
MAX_CSV_ROWS = 300_000  # rows of the weights' .csv (about 12 MB); larger analyses export the .npy only
EXPORT_NAMES = {"npy": "attention-weights.npy", "csv": "attention-weights.csv", "json": "attention-analysis.json"}
STALE = "The model has changed since this analysis: press Analyse again first."


@dataclass(frozen=True)
class Analysis:
    """The last analysed text of a session, and what the tools below the heatmaps found in it."""

    ids: list[int]
    labels: list[str]  # readable token labels
    maps: torch.Tensor  # (L, H, T, T) float16: half the memory a session keeps; ~4 significant digits
    summaries: list[HeadSummary]
    trained: weakref.ReferenceType  # the session's model then (weak: a replaced one must go)
    step: int  # ... and its training step then
    # the latest result of each tool, for the export: "steps" (HeadSteps), "knock_out" (a dict),
    # "importance" ({mode: (L, H) tensor}), "lens" (LogitLens); and "intact", the continuation of
    # the text with every head, the same for every knock-out of this analysis
    results: dict = field(default_factory=dict)

    def weights(self) -> torch.Tensor:
        return self.maps.float()

    def of(self, trained: TrainedModel | None) -> bool:
        """Whether this analysis shows `trained` as it is now: the same model, trained no further."""
        return trained is not None and self.trained() is trained and self.step == trained.step


class AttentionHandlers:
    """The tab's event handlers as plain methods (tests call them with a session id as request)."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.scratch = Path(tempfile.mkdtemp(prefix="attention-exports-"))  # exports to download
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)

    def analyse(self, text: str, request: gr.Request):
        """Run the model on `text`: status, grid, summary figure and table, pickers, large view, head view.

        A text longer than the model (or this server) can take is cut to its first tokens and
        the status says so: a built-in example must not fail on a short-context model.
        """
        settings = self.ctx.settings
        text = validate.text(text, "Text", settings.max_prompt_chars, cap=settings.cap_hint("max_prompt_chars"))
        with self.ctx.registry.job(request, "attention") as session:
            reading = _reading(session)
            model, tokenizer = reading.model, reading.tokenizer
            with validate.user_errors():
                all_ids = tokenizer.encode(text)
            if len(all_ids) < 2:
                raise gr.Error("The text has fewer than 2 tokens; attention needs at least 2 to choose between.")
            ids = all_ids[:self._token_limit(model)]
            with validate.user_errors():
                maps = attention_maps(model, ids)  # (L, H, T, T)
                summaries = summarize_heads(maps, ids, probe_induction(model))
            analysis = Analysis(ids, token_labels(tokenizer, ids), maps.half(), summaries,
                                weakref.ref(reading), reading.step)
            session.attention = analysis
        return self._render(analysis, self._cut_note(len(all_ids), len(ids), model.config.block_size))

    def _token_limit(self, model: GPT) -> int:
        """The most tokens an analysis takes: the model's context, and this server's cap."""
        return min(model.config.block_size, self.ctx.settings.max_attention_tokens)

    def _cut_note(self, n_tokens: int, kept: int, block_size: int) -> str:
        """Why a text was cut, for the status; empty when it was not."""
        if kept == n_tokens:
            return ""
        if kept == block_size:
            why = f"this model's context is {kept} tokens, as far back as it can attend."
        else:
            why = f"this server shows at most {kept}. {self.ctx.settings.cap_hint('max_attention_tokens')}"
        return f"Kept the first {kept} of the text's {n_tokens} tokens: {why}"

    def _render(self, analysis: Analysis, cut_note: str):
        maps = analysis.weights()
        n_layer, n_head, n_tokens, _ = maps.shape
        query = n_tokens - 1  # the last token: the one whose next token the model predicts
        standouts = _standouts(analysis)  # open the most distinctive head, not an arbitrary first one
        layer, head = (standouts[0].layer, standouts[0].head) if standouts else (0, 0)
        return (
            _status(analysis, cut_note),
            figures.heatmap_grid(maps, analysis.labels),
            figures.summary_figure(analysis.summaries),
            figures.summary_table(analysis.summaries),
            gr.Dropdown(choices=[(f"Layer {i}", i) for i in range(n_layer)], value=layer),
            gr.Dropdown(choices=[(f"Head {i}", i) for i in range(n_head)], value=head),
            gr.Dropdown(choices=[(name, i) for i, name in enumerate(figures.axis_labels(
                analysis.labels, [(t, t + 1) for t in range(n_tokens)]))], value=query),
            figures.head_heatmap(maps[layer, head], analysis.labels, layer, head),
            figures.head_view(head_view(maps, query)[layer], analysis.labels, query, layer),
        )

    def show_head(self, layer, head, request: gr.Request):
        """The large view of one head of the last analysis."""
        analysis = self._analysis(request)
        layer, head = self._layer_head(analysis, layer, head)
        return figures.head_heatmap(analysis.weights()[layer, head], analysis.labels, layer, head)

    def show_query(self, layer, query, request: gr.Request):
        """The head view of one query token in one layer of the last analysis."""
        analysis = self._analysis(request)
        layer, _ = self._layer_head(analysis, layer, 0)
        query = validate.integer(query, "Query token", 0, len(analysis.ids) - 1)
        weights = head_view(analysis.weights(), query)[layer]  # (H, T)
        return figures.head_view(weights, analysis.labels, query, layer)

    def select_head(self, evt: gr.SelectData, request: gr.Request):
        """A click on a row of the summary table opens that head in the large view."""
        analysis = self._analysis(request)
        row = evt.row_value or [None, None]  # the clicked row's values (layer, head first), even if sorted
        layer, head = self._layer_head(analysis, row[0], row[1])
        return layer, head, self.show_head(layer, head, request)

    def last_text(self, request: gr.Request) -> str:
        """The session's last generated text, cut to its last tokens that fit the context."""
        session = self.ctx.registry.get(request)
        if not session.last_text:
            raise gr.Error("Nothing generated yet: generate some text on the Generate tab first.")
        reading = _reading(session)
        model, tokenizer = reading.model, reading.tokenizer
        limit = self._token_limit(model)
        with validate.user_errors():
            ids = tokenizer.encode(session.last_text)
        if len(ids) <= limit:
            return session.last_text
        gr.Info(f"Kept the last {limit} of {len(ids)} tokens: the most the model (or this server) can look at.")
        return tokenizer.decode(ids[-limit:])

    def probe(self, request: gr.Request) -> str:
        """A fresh repeated random-token text, the standard test for induction heads."""
        session = self.ctx.registry.get(request)
        reading = _reading(session)
        model, tokenizer = reading.model, reading.tokenizer
        # a random length too: a head that looks back a fixed distance matches only one of them
        longest = max(PROBE_HALF_MIN, min(self._token_limit(model) // 2, PROBE_HALF_MAX))
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

    def _analysis(self, request: gr.Request) -> Analysis:
        analysis = self.ctx.registry.get(request).attention
        if analysis is None:
            raise gr.Error("Analyse a text first.")
        return analysis

    @staticmethod
    def _layer_head(analysis: Analysis, layer, head) -> tuple[int, int]:
        n_layer, n_head = analysis.maps.shape[:2]
        return validate.integer(layer, "Layer", 0, n_layer - 1), validate.integer(head, "Head", 0, n_head - 1)

    # ---- inside a head: step by step, knock-outs, the logit lens, the export

    def head_steps(self, layer, head, query, without_scale, without_mask, request: gr.Request):
        """One head's arithmetic for one query token of the analysed text: a note, the table of
        scores and weights (the toggles add the weights without sqrt(d), without the mask), the vectors."""
        with self._current(request) as (_, analysis, reading):
            layer, head = self._layer_head(analysis, layer, head)
            query = validate.integer(query, "Query token", 0, len(analysis.ids) - 1)
            without_scale = _flag(without_scale, "Without ÷√d")
            without_mask = _flag(without_mask, "Without the mask")
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

    def knock_out(self, heads, mode, request: gr.Request) -> tuple[str, str, str]:
        """The loss on the analysed text with `heads` switched off, and a greedy continuation of it
        with and without them: a note and the two continuations."""
        mode = validate.choice(mode, "Mode", ABLATIONS)
        with self._current(request) as (_, analysis, reading):
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
                heads=[_head_name(*pair) for pair in off], mode=mode, loss_before=before, loss_after=after,
                continuation_tokens=n_new, continuation_intact=intact, continuation_knocked_out=knocked)
        names = ", ".join(_head_name(*pair) for pair in off)
        note = (f"**{names}** {MODE_NAMES[mode]}: the loss on the analysed text goes from **{before:.4f}** to "
                f"**{after:.4f}** ({after - before:+.4f}). Below, the model continues the text greedily "
                f"(its likeliest token each time) for {n_new} tokens, with every head and without "
                f"{'this head' if len(off) == 1 else 'these heads'}.")
        return note, intact, knocked

    def importance(self, mode, request: gr.Request):
        """Every head's importance: the loss increase on the analysed text when it alone is off."""
        mode = validate.choice(mode, "Mode", ABLATIONS)
        with self._current(request) as (_, analysis, reading):
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

    def lens(self, top_k, request: gr.Request):
        """The logit lens on the analysed text: a note on where the answer appears, and the figure."""
        top_k = validate.integer(top_k, "Top predictions", 1, LENS_TOP_K_MAX)
        with self._current(request) as (_, analysis, reading):
            with validate.user_errors():
                result = logit_lens(reading.model, analysis.ids, top_k)
            analysis.results["lens"] = result
            top_labels = _top_labels(result, reading.tokenizer)
        return _lens_note(result), inside.lens_figure(result, analysis.labels, top_labels)

    def export(self, request: gr.Request) -> tuple[str, list[str]]:
        """The analysis as files to download: the weights (.npy, and .csv when not too large) and
        a .json of the text, its tokens, the summaries and what the tools found. Named by the app,
        in a folder named by the server's id for the session: nothing a client sends names a path."""
        with self._current(request) as (session, analysis, reading):
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
            document = _analysis_json(analysis, reading)
            (folder / EXPORT_NAMES["json"]).write_text(json.dumps(document, allow_nan=False), encoding="utf-8")
            written.append(folder / EXPORT_NAMES["json"])
        return note, [str(path) for path in written]

    def reset_tools(self, request: gr.Request):
        """After a new analysis: its heads to pick from, and the tools' old results cleared."""
        analysis = self._analysis(request)
        n_layer, n_head = analysis.maps.shape[:2]
        names = [_head_name(layer, head) for layer in range(n_layer) for head in range(n_head)]
        cleared = ("", None, None, "", "", "", None, "", None, "", None)  # the other tools' outputs, in order
        return gr.Dropdown(choices=names, value=[], multiselect=True), *cleared

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


def _reading(session: Session) -> TrainedModel:
    """What the tab reads: the session's own model, or GPT-2 when the picker says so."""
    if session.reading is None:
        raise gr.Error("There is no model yet: train one on the Train tab (or upload a checkpoint), "
                       "or pick GPT-2 above.")
    return session.reading


def _flag(value, name: str) -> bool:
    """A checkbox's value: True or False (None, as an API caller may leave it, is False)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise gr.Error(f"{name} must be true or false, got {repr(value)[:40]}.")
    return value


def _head_name(layer: int, head: int) -> str:
    return f"L{layer} H{head}"


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


def _md(text: str) -> str:
    """Text from the user (a token) shown literally in Markdown."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~&])", r"\\\1", text)


def _continue(model: GPT, ids: list[int], n_new: int) -> list[int]:
    """The `n_new` tokens the model writes greedily after `ids`."""
    idx = torch.tensor([ids], device=next(model.parameters()).device)
    return generate(model, idx, n_new, temperature=0)[0, len(ids):].tolist()


def _steps_note(steps: HeadSteps, labels: list[str], without_scale: bool, without_mask: bool) -> str:
    """What the step-by-step table shows, and what each toggle changes."""
    names = figures.axis_labels(labels, [(t, t + 1) for t in range(len(labels))])
    d, query, weight = steps.q.numel(), steps.query, steps.weights.max().item()
    strongest = _md(names[int(steps.weights.argmax())])
    lines = [f"**Layer {steps.layer}, head {steps.head}, query {_md(names[query])}**, head size d = {d}. "
             f"The query's vector q meets every key k (q·k), the products are divided by √d = {math.sqrt(d):.3g}, "
             f"the keys after the query get -∞ (the mask) and the softmax turns the rest into weights: the "
             f"**softmax** column is row {_md(names[query])} of the head's heatmap above (largest: {weight:.3f} "
             f"on {strongest}). The head's output is the values added up with these weights."]
    if without_scale:
        lines.append(f"**Without ÷√d** the scores would be {math.sqrt(d):.3g} times larger and the largest "
                     f"weight {steps.weights_unscaled.max().item():.3f} instead of {weight:.3f}: the softmax "
                     "sharpens, and in a wide head it saturates on one key, where learning through it stalls.")
    if without_mask:
        if query == len(labels) - 1:
            lines.append("**Without the mask** nothing changes for the last token: no token comes after it. "
                         "Pick an earlier query token to see the future leak in.")
        else:
            future = steps.weights_unmasked[query + 1:].sum().item()
            later = f"later tokens (#{query + 1} to #{len(labels) - 1})"
            if future < 0.0005:
                lines.append(f"**Without the mask** {_md(names[query])} would still put almost nothing ({future:.1e}) "
                             f"on {later}: this head's scores keep it on the past here, but only the mask "
                             "guarantees it, in training too.")
            else:
                lines.append(f"**Without the mask** {_md(names[query])} would put {future:.3f} of its attention on "
                             f"{later}: it would see the future, which it cannot do while it writes a text, and "
                             "training would teach it to copy the answer.")
    return "  \n".join(lines)


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


def _analysis_json(analysis: Analysis, reading: TrainedModel) -> dict:
    """The analysis as plain JSON: the text, its tokens, the summaries, and each tool's latest result."""
    config = reading.model.config
    document = {
        "text": reading.tokenizer.decode(analysis.ids), "ids": analysis.ids, "tokens": analysis.labels,
        "model": {**{name: getattr(config, name) for name in ("n_layer", "n_head", "n_embd", "block_size",
                                                               "vocab_size")}, "step": analysis.step},
        "weights": f"{EXPORT_NAMES['npy']}: float32 (layer, head, query, key)",
        "summaries": [dataclasses.asdict(summary) for summary in analysis.summaries],
    }
    results = analysis.results
    if "steps" in results:
        document["head_steps"] = results["steps"].to_dict()
    if "knock_out" in results:
        document["knock_out"] = results["knock_out"]
    if "importance" in results:
        document["importance"] = {mode: values.tolist() for mode, values in results["importance"].items()}
        document["importance_tokens"] = results["importance_tokens"]  # the loss's tokens: the first n
    if "lens" in results:
        lens = results["lens"]
        document["logit_lens"] = {
            "depths": lens.depths, "top_tokens": _top_labels(lens, reading.tokenizer),
            **{name: getattr(lens, name).tolist() for name in ("top_ids", "top_probs", "target_probs", "target_ranks")},
        }
    return document


def _standouts(analysis: Analysis) -> list[HeadSummary]:
    """Up to 4 heads with a named pattern, strongest first."""
    named = (s for s in analysis.summaries if s.label not in ("mixed", "uniform"))
    return sorted(named, key=lambda s: s.score, reverse=True)[:4]


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


FIGURE_FORMATS = ("png", "svg")
STEPS_HELP = (
    "The arithmetic of one head for one query token, in the model's own numbers: pick the **Layer**, "
    "**Head** and **Query token** above (the steps follow them once shown). Cells are rounded; hover for "
    "the exact value. The toggles add what the weights would be without the division by √d, and without "
    "the causal mask."
)
KNOCKOUT_HELP = (
    "Switch heads off and see what the model loses: the loss on the analysed text before and after, "
    "and how it continues the text. The map shows every head's importance at once: the loss increase "
    "when that head **alone** is switched off (red: the model needs it; blue: it does better without)."
)
MODE_HELP = ("zeroed: the head writes nothing. Mean: it writes its average over the text's tokens at "
             "every token, so what it writes everywhere stays and only what depends on the token goes.")
LENS_HELP = (
    "Read the residual stream after each layer as if the model ended there (through its final LayerNorm "
    "and output layer): at which depth does the right next token appear? Rows are depths, columns positions; "
    "each cell shows the top prediction, its colour the probability of the token that really comes next. "
    "Hover for the top predictions."
)
EXPORT_HELP = (
    "Every figure on this tab downloads as **PNG** or **SVG** from the buttons at its top right (a heatmap's "
    "cells are an image inside the SVG). Here: the attention weights of the analysed text as `.npy` "
    "(float32, layer x head x query x key) and `.csv` (one row per layer, head, query and key at or before "
    "it), and the analysis as `.json` with what the tools above have shown."
)


def _plot(label: str, elem_id: str, **kwargs) -> gr.Plot:
    """A gr.Plot with PNG and SVG buttons: plotly draws the file in the browser, no server call."""
    buttons = {fmt: gr.Button(fmt.upper(), size="sm") for fmt in FIGURE_FORMATS}
    plot = gr.Plot(label=label, elem_id=elem_id, buttons=list(buttons.values()), **kwargs)
    for fmt, button in buttons.items():
        scale = 2 if fmt == "png" else 1  # a sharp PNG; an SVG is sharp at any size
        button.click(None, js=f"""() => {{
            const plot = document.querySelector("#{elem_id} .js-plotly-plot");
            const options = {{format: "{fmt}", filename: "{elem_id}", scale: {scale}}};
            if (plot && window.Plotly) window.Plotly.downloadImage(plot, options);
        }}""", api_visibility="private")
    return plot


def build(ctx: AppContext) -> None:
    handlers = AttentionHandlers(ctx)
    model_picker.build(ctx, "attention")
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
    summary_plot = _plot("What each head does", "attention-summary")
    grid = _plot("Every layer x head", "attention-grid")
    with gr.Row():
        layer = gr.Dropdown(label="Layer", choices=[("Layer 0", 0)], value=0, scale=1)
        head = gr.Dropdown(label="Head", choices=[("Head 0", 0)], value=0, scale=1)
        query = gr.Dropdown(label="Query token (head view)", choices=[("#0", 0)], value=0, scale=2)
    with gr.Row():
        large = _plot("One head, large", "attention-large")
        view = _plot("Head view: where a token looks", "attention-view")
    with gr.Accordion("Per-head table (click a row to open that head)", open=False):
        gr.Markdown(figures.SUMMARY_LEGEND, elem_id="attention-table-legend")
        table = gr.Dataframe(headers=figures.SUMMARY_HEADERS, interactive=False, wrap=True,
                             column_widths=figures.SUMMARY_WIDTHS,
                             show_search="search", elem_id="attention-table")
    with gr.Accordion("Inside one head: step by step", open=False, elem_id="steps-section"):
        gr.Markdown(STEPS_HELP)
        with gr.Row(equal_height=True):
            without_scale = gr.Checkbox(label="Also without ÷√d", elem_id="steps-no-scale")
            without_mask = gr.Checkbox(label="Also without the mask", elem_id="steps-no-mask")
            steps_run = gr.Button("Show the steps", variant="primary", elem_id="steps-run")
        steps_note = gr.Markdown(elem_id="steps-note")
        steps_table = _plot("Step by step", "steps-table")
        steps_vectors = _plot("The vectors", "steps-vectors")
    with gr.Accordion("Knock out heads", open=False, elem_id="knockout-section"):
        gr.Markdown(KNOCKOUT_HELP)
        with gr.Row():
            knocked_heads = gr.Dropdown(label="Heads to switch off", choices=[], value=[], multiselect=True,
                                        scale=2, elem_id="knockout-heads")
            mode = gr.Radio(MODE_CHOICES, value=ABLATIONS[0], label="Switched off how", info=MODE_HELP,
                            scale=2, elem_id="knockout-mode")
            knock_run = gr.Button("Knock out", variant="primary", scale=1, elem_id="knockout-run")
        knock_note = gr.Markdown(elem_id="knockout-note")
        with gr.Row():
            intact = gr.Textbox(label="Continuation with every head", lines=3, interactive=False,
                                elem_classes="mono", elem_id="knockout-intact")
            knocked = gr.Textbox(label="Continuation with the heads off", lines=3, interactive=False,
                                 elem_classes="mono", elem_id="knockout-knocked")
        importance = _plot("Head importance", "knockout-importance")
    with gr.Accordion("Logit lens", open=False, elem_id="lens-section"):
        gr.Markdown(LENS_HELP)
        with gr.Row(equal_height=True):
            top_k = gr.Slider(1, LENS_TOP_K_MAX, value=5, step=1, label="Top predictions in the hover", scale=2)
            lens_run = gr.Button("Show the logit lens", variant="primary", scale=1, elem_id="lens-run")
        lens_note = gr.Markdown(elem_id="lens-note")
        lens_plot = _plot("Logit lens", "lens-plot")
    with gr.Accordion("Export", open=False, elem_id="export-section"):
        gr.Markdown(EXPORT_HELP)
        export_run = gr.Button("Prepare the files", elem_id="export-run")
        export_note = gr.Markdown(elem_id="export-note")
        files = gr.File(label="Files", file_count="multiple", interactive=False, elem_id="export-files")

    outputs = [status, grid, summary_plot, table, layer, head, query, large, view]
    analysed = gr.on([analyse.click, text.submit], handlers.analyse, [text], outputs, api_name="attention",
                     **ctx.heavy("attention"))
    tools = [knocked_heads, steps_note, steps_table, steps_vectors, knock_note, intact, knocked, importance,
             lens_note, lens_plot, export_note, files]
    analysed.success(handlers.reset_tools, None, tools, api_name="attention_reset_tools",
                     api_visibility="private", **ctx.cheap())
    last.click(handlers.last_text, None, text, api_name="attention_last_text", **ctx.cheap())
    probe.click(handlers.probe, None, text, api_name="attention_probe", **ctx.cheap())
    gr.on([layer.input, head.input], handlers.show_head, [layer, head], large, api_name="attention_head",
          **ctx.cheap())
    gr.on([layer.input, query.input], handlers.show_query, [layer, query], view, api_name="attention_query",
          **ctx.cheap())
    # UI-only events: a table click and the Train tab's signal carry nothing an API caller needs
    steps_inputs, steps_outputs = [layer, head, query, without_scale, without_mask], [steps_note, steps_table,
                                                                                    steps_vectors]
    table.select(handlers.select_head, None, [layer, head, large], api_name="attention_select",
                 api_visibility="private", **ctx.cheap()).success(
        handlers.follow_pickers, steps_inputs, steps_outputs, api_name="attention_steps_follow_table",
        api_visibility="private", **ctx.heavy("attention"))
    gr.on([layer.input, head.input, query.input], handlers.follow_pickers, steps_inputs, steps_outputs,
          api_name="attention_steps_follow", api_visibility="private", **ctx.heavy("attention"))
    gr.on([steps_run.click, without_scale.input, without_mask.input], handlers.head_steps, steps_inputs,
          steps_outputs, api_name="head_steps", **ctx.heavy("attention"))
    knock_run.click(handlers.knock_out, [knocked_heads, mode], [knock_note, intact, knocked], api_name="ablate",
                    **ctx.heavy("attention")).success(
        handlers.importance, [mode], importance, api_name="head_importance", **ctx.heavy("attention"))
    lens_run.click(handlers.lens, [top_k], [lens_note, lens_plot], api_name="logit_lens", **ctx.heavy("attention"))
    export_run.click(handlers.export, None, [export_note, files], api_name="attention_export",
                     **ctx.heavy("attention"))
    ctx.registry.on_free(handlers.free)
    ctx.model_changed.change(handlers.model_changed, None, status, api_name="attention_model_changed",
                             api_visibility="private", **ctx.cheap())
