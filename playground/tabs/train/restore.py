"""Coming back: a browser's model survives a restart of the server (or a crash, or a Space's sleep).

The browser keeps a token the server made (`gr.BrowserState`, in its local storage); never a path.
While a run trains, its model, training state, curve, form and the runs kept to compare go to the state
store under that token at every evaluation, at Stop and at the end (`keeper`: encoded in memory on the
training thread, written by the store's own thread, so a step never waits for the disk). When a page opens,
`come_back` reads its token: if the session has no model yet and the store holds one, it is loaded as an
upload is (the same caps and checks) and the form, the chart and the other tabs follow; Train then continues
exactly. If Train was pressed first (a busy server answers the page's load late), the model trained is kept.

A token is untrusted input: one the server's key did not sign gets a fresh one (and a note), one
the store does not know starts afresh (a note when its model was evicted to keep the store's budget).
A kept model that cannot be read (damaged on the disk, or no longer within this server's caps) starts
afresh too, said in the learner's words; the details go to the log and the entry is put aside for the
operator (`StateStore.put_aside`).

Memory only (no store, or one that cannot be written): tokens are made all the same, and a closed tab's
model stays in memory a while (`SessionRegistry.keep_closed`), so a reload of the same browser gets it
back as from the store (`SessionRegistry.reopen`); a restart of the server loses it.

`RestoreHandlers` is given the form's rules and the checkpoints (`adopt`: a kept model comes back as an upload
does) by `TrainHandlers` (`layout`); the run is given its `keeper`.
Never imports the layout or the link.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from core.checkpoint import CheckpointError
from core.tokenizers import token_labels
from playground.context import AppContext
from playground.kept import Kept, keep, load_kept
from playground.figures.attention import live_heatmap
from playground.gradio_internals import plotly_json
from playground.sessions import Session
from playground.store import CODE_TTL_S, Tokens
from playground.tabs.train.checkpoints import CheckpointHandlers, checkpoint_meta
from playground.tabs.train.form import FORM_FIELDS, PASTE, FormRules, Recipe, TrainForm
from playground.tabs.train.replay import movie_note, scores_plot

log = logging.getLogger("playground")
STORAGE_KEY = "attention-playground-session"  # the browser's local-storage key for its token
# ... and beside it, a flag that this browser was given a token: when the store's BrowserState secret is replaced
# (it was damaged), the browser cannot decrypt its token and sends none, and only this flag, under a secret that
# never changes (it guards nothing: the flag is no secret), says that a token was lost rather than never given
SEEN_KEY, SEEN_SECRET = "attention-playground-seen", "a-flag-not-a-secret"
KEPT_FIELDS = tuple(name for name in FORM_FIELDS if name != "upload")  # a file's text is kept as pasted text
UNREADABLE = ("This browser's saved session could not be read (this server did not make it, or its keys were replaced "
              "since): starting afresh.")
EVICTED = ("Your model from an earlier visit is gone: the server keeps the most recently trained models within "
           "its storage budget, and yours had waited longest. Press **Train** to start again.")
HOURS = round(CODE_TTL_S / 3600)  # how long a continue-elsewhere code works
CARRY_NOTE = ("Anyone with this code can take your model: treat it as a password. Paste it under \"Have a code?\" "
              f"on another browser or laptop, or at another address of this server, within {HOURS} hours; it works "
              "once. Both browsers then train the same model, and the one that saves last (at an evaluation, Stop or "
              "the end of a run) is what either finds on its next visit.")
BAD_CODE = ("That code does not open a model here: it has a typo, was made by another server, was used already or is "
            f"older than {HOURS} hours. Make a new one in the browser that has the model.")
DAMAGED = "Your saved model was damaged and could not be read: starting afresh. Press **Train** to begin again."
WELCOME = "Welcome back: your model is here as you left it, at step {step}, and Generate and Attention read it."
MAX_SAMPLE_CHARS = 20_000  # a live sample is SAMPLE_TOKENS tokens: far fewer characters, even of GPT-2's
MEMORY_ONLY = ("⚠️ This server cannot save models right now (its storage is full or not writable): yours lives "
               "in memory only. A reload of this tab finds it again within {minutes:.0f} minutes of closing it (while "
               "the server has room), but a restart of the server loses it. Download a checkpoint to keep it.")


def kept_form(form: TrainForm, recipe: Recipe) -> dict[str, Any]:
    """The form a run trained with, to put back: an uploaded file's text as pasted text."""
    values = {name: getattr(form, name) for name in KEPT_FIELDS}
    if recipe.text is not None:
        values.update(corpus=PASTE, text=recipe.text)
    return values


class RestoreHandlers:
    """Keep the session's state in the store as it trains; bring it back when its browser returns."""

    def __init__(self, ctx: AppContext, rules: FormRules, checkpoints: CheckpointHandlers) -> None:
        self.ctx, self.settings, self.registry = ctx, ctx.settings, ctx.registry
        self.rules, self.checkpoints = rules, checkpoints

    @functools.cached_property
    def tokens(self) -> Tokens:
        """Makes and checks the browsers' tokens: with the store's key (its servers share it), else with this
        process's own (memory only: a reload finds its closed tab's model, a restart nothing)."""
        return self.ctx.store.tokens if self.ctx.store is not None else Tokens.of_this_process()

    def keeper(self, session: Session, form: TrainForm, recipe: Recipe) -> Callable[[], None]:
        """What a run calls at each evaluation and at its end: the session's state, to the store under the
        browser's token as it is then (a Train pressed before the page's load event gave the browser its token,
        on a busy server, is kept all the same; a client without a browser, the API, has none)."""
        session.kept_form = kept_form(form, recipe)  # a reload puts it back, from the store or from memory
        store = self.ctx.store
        if store is None:
            return lambda: None
        return lambda: self._keep(session)

    def _keep(self, session: Session) -> None:
        """The session's state to the store, when its browser has a token."""
        if session.token is not None:
            self.ctx.store.writer.submit(session.token, _kept(session))

    def unstored(self, session: Session) -> bool:
        """Whether no store keeps the session's model now (its `keep_closed`: it then stays for a reload)."""
        return self.ctx.store is None or not self.ctx.store.working

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
                # the page still shows its form and chart: only the model was away
                return self._adopt_readable(session, archive) is not None

    def come_back(self, kept, seen, request: gr.Request) -> dict[str, Any]:
        """At page load: the browser's token (a fresh one if it has none or an unreadable one) and, when
        the store holds this token's model (memory only: a closed tab of this browser left it) and the session
        has none, the model, form and chart back. `seen`: the browser had a token before (see SEEN_KEY). A session
        with a token already keeps it, and the browser is given it."""
        store = self.ctx.store
        session = self.registry.get(request)
        if session.token is not None:
            # Given before this event reached a busy server (a code taken or made on the page) or by this event
            # already: it stays, and the browser keeps it. Replaced, the model taken with a code was not found on
            # the next visit. (Nor does a client repeating this make the store write again and again.)
            return {"token": session.token, "seen": True, "status": gr.skip()}
        token = self.tokens.verified(kept)
        session.token = token or self.tokens.new()
        # Train pressed before this, on a busy server: a run keeps its model as it trains; an ended run's, now
        if session.trained is not None and store is not None and not session.busy:
            self._keep(session)
        if token is None:
            lost = kept not in (None, "") or seen is True
            return {"token": session.token, "seen": True, "status": UNREADABLE if lost else self._memory_note()}
        if session.trained is not None:  # this session already has a model: nothing to bring back
            return {"status": gr.skip()}
        if self.unstored(session):
            return self._reopened(session)
        with self.registry.job(request, "restoring your model") as session, \
                tempfile.TemporaryDirectory(prefix="restore-") as folder:
            archive = store.fetch(token, Path(folder))
            if archive is None:
                return {"status": EVICTED if store.evicted(token) else gr.skip()}
            meta = self._adopt_readable(session, archive)
            if meta is None:
                return {"status": DAMAGED}
        return {"status": WELCOME.format(step=session.trained.step), **self._back_on_the_page(session, meta)}

    def carry_code(self, request: gr.Request) -> str:
        """A continue-elsewhere code for the session's model, kept in the store as it is now."""
        store = self._working_store()
        with self.registry.job(request, "keeping your model for another browser") as session:
            if session.trained is None:
                raise gr.Error("There is no model yet: train one (or upload a checkpoint) first.",
                               print_exception=False)
            session.token = session.token or self.tokens.new()  # an API client has none until now
            store.writer.submit(session.token, _kept(session))
            if not (store.writer.flush() and store.working):
                raise gr.Error(f"The model could not be kept: {store.problem or 'the store is slow'}. Download a "
                               "checkpoint and upload it in the other browser instead.", print_exception=False)
            return store.carry_code(session.token)

    def take_code(self, code: str, request: gr.Request) -> dict[str, Any]:
        """The model a code stands for, as this session's model (replacing any it has), with its form and
        chart; this browser keeps the model's token from now on."""
        store = self._working_store()
        if not isinstance(code, str) or not code.strip():
            raise gr.Error("Paste the code shown in the other browser first.", print_exception=False)
        with self.registry.job(request, "taking your model from another browser") as session, \
                tempfile.TemporaryDirectory(prefix="carry-") as folder:
            token = store.redeem(code)
            archive = store.fetch(token, Path(folder)) if token is not None else None
            if archive is None:
                raise gr.Error(BAD_CODE, print_exception=False)
            meta = self._adopt_readable(session, archive)
            if meta is None:
                raise gr.Error(DAMAGED, print_exception=False)
            session.token = token
            store.use_up(code)
        status = (f"Your model from the other browser is here, at step {session.trained.step}: Train continues it, "
                  "Generate and Attention read it. This browser keeps it from now on.")
        return {"token": token, "status": status, "carry_box": "", **self._back_on_the_page(session, meta)}

    def _working_store(self):
        """The state store, or gr.Error saying why a model cannot travel by code here."""
        store = self.ctx.store
        if store is None or not store.working:
            raise gr.Error("This server cannot keep models (its storage is off, full or not writable), so a code "
                           "cannot carry one: download a checkpoint and upload it in the other browser.",
                           print_exception=False)
        return store

    def _memory_note(self) -> str | dict:
        """What a page says of where its model is kept: that it is in memory only, unless the store works or the
        operator turned it off (their choice is not a problem to report)."""
        store = self.ctx.store
        if (store is not None and store.working) or self.settings.state_dir == "off":
            return gr.skip()
        return MEMORY_ONLY.format(minutes=self.settings.api_ttl_s / 60)

    def _reopened(self, session: Session) -> dict[str, Any]:
        """Memory only: the model a closed tab of this browser left, back with its form, chart and movie as from
        the store; else the note on where models live."""
        closed = self.registry.reopen(session)
        if closed is None:
            return {"status": self._memory_note()}
        session.trained, session.runs, session.kept_form = closed.trained, closed.runs, closed.kept_form
        note = self._memory_note()
        status = WELCOME.format(step=session.trained.step) + (f"\n\n{note}" if isinstance(note, str) else "")
        return {"status": status,
                **self._back_on_the_page(session, {"history": session.trained.history, "form": session.kept_form})}

    def _adopt_readable(self, session: Session, archive: Path) -> dict | None:
        """`_adopt_kept`, or None when the archive cannot be read: then it is put aside and the details logged
        (the learner is told in their words). A full server is said as it is: the model stays in the store."""
        try:
            return self._adopt_kept(session, archive)
        except Exception as error:
            if isinstance(error, gr.Error) and not isinstance(error.__cause__, ValueError):  # not the archive's
                raise  # fault (`validate.user_errors` says what is): the server is full, and says so
            log.warning("state store: a kept model could not be read and is put aside (%s: %s)",
                        type(error.__cause__ or error).__name__, error, exc_info=not isinstance(error, gr.Error))
            self.ctx.store.put_aside(session.token)
            return None

    def _adopt_kept(self, session: Session, archive: Path) -> dict:
        """The store's archive as the session's model, with its form and compared runs; its meta."""
        meta = self.checkpoints.adopt(session, str(archive), "your earlier model")
        session.kept_form, session.trained.sample = meta.get("form"), _kept_sample(meta)
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

    def _back_on_the_page(self, session: Session, meta: dict) -> dict[str, Any]:
        """What a model coming back shows, however it came (the store, memory, a code): the chart, the other
        tabs' signal and the model's fields, the movie, the kept form and the last live sample."""
        return {**self.checkpoints.shown_after_load(session, meta), **_movie_shown(session),
                **self._checked_form(meta.get("form")), "sample": session.trained.sample}

    def _checked_form(self, values: object) -> dict[str, Any]:
        """The kept form if this server's rules still take it (its caps may have changed), else nothing."""
        if not isinstance(values, dict) or set(values) != set(KEPT_FIELDS):
            return {}
        try:
            self.rules.recipe(TrainForm(**values))
        except gr.Error:
            return {}
        return dict(values)


def _kept(session: Session) -> Kept:
    """What the store keeps of a session: its model as a checkpoint with its training state, the form it
    trained with, the runs kept to compare and the attention movie."""
    trained = session.trained
    meta = {**checkpoint_meta(trained), "form": session.kept_form, "run": trained.run, "sample": trained.sample}
    return keep(trained.model, trained.tokenizer, meta, trained.training_state(), session.runs, trained.movie)


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
        shown["attention"] = plotly_json(figure.to_json())
    return shown
