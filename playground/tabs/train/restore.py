"""Coming back: a browser's model survives a restart of the server (or a crash, or a Space's sleep).

The browser keeps a token the server made (`gr.BrowserState`, in its local storage); never a path.
While a run trains, its model, training state, curve, form and the runs kept to compare go to the state
store under that token at every evaluation, at Stop and at the end (`keeper`: encoded in memory on the training thread, written
by the store's own thread, so a step never waits for the disk). When a page opens, `come_back` reads
its token: if the session has no model yet and the store holds one, it is loaded as an upload is (the
same caps and checks) and the form, the chart and the other tabs follow; Train then continues exactly.

A token is untrusted input: one not in the form the server makes gets a fresh one (and a note), one
the store does not know starts afresh (a note when its model was evicted to keep the store's budget).

`RestoreHandlers` is mixed into `TrainHandlers` (`layout`), which gives it `ctx`, `registry` and `_adopt`.
Never imports the layout or the link.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.components.plot import PlotData

from core.checkpoint import CheckpointError, Encoded, encode, load_kept
from core.movie import encode_movie
from core.runs import encode_runs
from core.tokenizers import token_labels
from playground.figures.attention import live_heatmap
from playground.sessions import Session
from playground.store import new_token, valid_token
from playground.tabs.train.checkpoints import CheckpointHandlers, checkpoint_meta
from playground.tabs.train.form import FORM_FIELDS, PASTE, Recipe, TrainForm
from playground.tabs.train.replay import movie_note, scores_plot

log = logging.getLogger("playground")
STORAGE_KEY = "attention-playground-session"  # the browser's local-storage key for its token
KEPT_FIELDS = tuple(name for name in FORM_FIELDS if name != "upload")  # a file's text is kept as pasted text
UNREADABLE = "This browser's saved session could not be read (it was not made by this server): starting afresh."
EVICTED = ("Your model from an earlier visit is gone: the server keeps the most recently trained models within "
           "its storage budget, and yours had waited longest. Press **Train** to start again.")
MAX_SAMPLE_CHARS = 20_000  # a live sample is SAMPLE_TOKENS tokens: far fewer characters, even of GPT-2's
MEMORY_ONLY = ("⚠️ This server cannot save models right now (its storage is full or not writable): yours lives "
               "in memory only, and a restart of the server loses it. Download a checkpoint to keep it.")


def kept_form(form: TrainForm, recipe: Recipe) -> dict[str, Any]:
    """The form a run trained with, to put back: an uploaded file's text as pasted text."""
    values = {name: getattr(form, name) for name in KEPT_FIELDS}
    if recipe.text is not None:
        values.update(corpus=PASTE, text=recipe.text)
    return values


class RestoreHandlers(CheckpointHandlers):
    """Keep the session's state in the store as it trains; bring it back when its browser returns."""

    def keeper(self, session: Session, form: TrainForm, recipe: Recipe) -> Callable[[], None]:
        """What a run calls at each evaluation and at its end: the session's state, to the store."""
        store, token = self.ctx.store, session.token
        if store is None or token is None:  # memory only, or a client without a browser (the API)
            return lambda: None
        session.kept_form = kept_form(form, recipe)
        return lambda: store.writer.submit(token, _kept(session))

    def set_aside(self, session: Session) -> bool:
        """Keep an idle session's model in the store so the registry may drop it from memory (its
        `on_offload`); False when the store cannot take it (then it stays, or goes the old way)."""
        store, trained = self.ctx.store, session.trained
        if store is None or not store.working or session.token is None or trained is None or session.busy:
            return False
        store.writer.submit(session.token, _kept(session))
        return store.writer.flush() and store.working  # on disk before it leaves memory

    def bring_back(self, session: Session) -> bool:
        """A set-aside model back into a new session of its owner (its `on_return`): whether it came."""
        with tempfile.TemporaryDirectory(prefix="return-") as folder:
            archive = self.ctx.store.fetch(session.token, Path(folder))
            if archive is None:
                return False
            with self.registry.job(session.key, "bringing your model back"):
                self._adopt_kept(session, archive)
        return True  # the page still shows its form and chart: only the model was away

    def come_back(self, kept, request: gr.Request) -> dict[str, Any]:
        """At page load: the browser's token (a fresh one if it has none or an unreadable one) and, when
        the store holds this token's model and the session has none, the model, form and chart back."""
        store = self.ctx.store
        if store is None or not store.working:
            off = self.settings.state_dir == "off"  # the operator's choice is not a problem to report
            return {"status": gr.skip() if off else MEMORY_ONLY}
        session = self.registry.get(request)
        token = valid_token(kept)
        if token is None:
            session.token = new_token()
            return {"token": session.token, "status": UNREADABLE if kept not in (None, "") else gr.skip()}
        session.token = token
        if session.trained is not None:  # this session already has a model: nothing to bring back
            return {"status": gr.skip()}
        with self.registry.job(request, "restoring your model") as session, \
                tempfile.TemporaryDirectory(prefix="restore-") as folder:
            archive = store.fetch(token, Path(folder))
            if archive is None:
                return {"status": EVICTED if store.evicted(token) else gr.skip()}
            meta = self._adopt_kept(session, archive)
        form = self._checked_form(meta.get("form"))
        status = (f"Welcome back: your model is here as you left it, at step {session.trained.step}, and Generate "
                  "and Attention read it.")
        session.trained.sample = _kept_sample(meta)
        return {"status": status, **self._shown_after_load(session, meta), **_movie_shown(session), **form,
                "sample": session.trained.sample}

    def _adopt_kept(self, session: Session, archive: Path) -> dict:
        """The store's archive as the session's model, with its form and compared runs; its meta."""
        meta = self._adopt(session, str(archive), "your earlier model")
        session.kept_form = meta.get("form")
        try:
            runs, session.trained.movie = load_kept(archive, session.model.config)  # Train goes on recording it
        except CheckpointError as error:  # the model is back; what came with it failed its checks and is dropped
            log.warning("kept runs or movie dropped: %s", error)
            runs = None
        if runs is not None:
            session.runs = runs
            run = meta.get("run")
            if isinstance(run, int) and 0 < run <= runs.last_number:  # Train goes on updating the same run
                session.trained.run = run
        return meta

    def _checked_form(self, values: object) -> dict[str, Any]:
        """The kept form if this server's rules still take it (its caps may have changed), else nothing."""
        if not isinstance(values, dict) or set(values) != set(KEPT_FIELDS):
            return {}
        try:
            self.recipe(TrainForm(**values))
        except gr.Error:
            return {}
        return dict(values)


def _kept(session: Session) -> Encoded:
    """What the store keeps of a session: its model as a checkpoint with its training state, the form it
    trained with, the runs kept to compare and the attention movie."""
    trained = session.trained
    meta = {**checkpoint_meta(trained), "form": session.kept_form, "run": trained.run, "sample": trained.sample}
    encoded = encode(trained.model, trained.tokenizer, meta, trained.training_state())
    movie = encode_movie(trained.movie) if trained.movie is not None and trained.movie.frames else None
    return dataclasses.replace(encoded, runs=encode_runs(session.runs), movie=movie)


def _kept_sample(meta: dict) -> str:
    """The live sample kept with the model ('' from a store entry without one, or with something else)."""
    sample = meta.get("sample")
    return sample if isinstance(sample, str) and len(sample) <= MAX_SAMPLE_CHARS else ""


def _movie_shown(session: Session) -> dict[str, Any]:
    """The kept movie on the page: its note, the head scores, the replay slider on its last snapshot (the
    slider's change draws it) and, when that snapshot is of the model's step (a run's last step always has
    one), the live map as the run left it; nothing when there is none (the load's notes stay)."""
    movie = session.trained.movie
    if movie is None:
        return {}
    last = movie.frames[-1]
    shown = {"movie_note": movie_note(movie, False), "head_scores": scores_plot(movie),
             "movie_step": gr.update(maximum=last.step, value=last.step)}
    if last.step == session.trained.step:
        figure = live_heatmap(last.maps.float(), token_labels(session.tokenizer, movie.probe_ids))
        shown["attention"] = PlotData(type="plotly", plot=figure.to_json())
    return shown
