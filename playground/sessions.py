"""Per-session server-side state: each browser tab's model, trainer and history.

Models never live in `gr.State` (a closed tab keeps that for an hour). Instead every handler
looks its session up by `request.session_hash`, which Gradio gives each browser tab and each
gradio_client `Client`:

    session = ctx.registry.get(request)       # created on first use; raises gr.Error if it expired
    with ctx.registry.job(request, "training") as session:
        ...                                    # at most one heavy job per session at a time

- `get` refreshes `last_used`; sessions idle longer than `settings.session_ttl_s` are swept.
- At most `settings.max_sessions` sessions exist; a new one evicts the least recently used idle
  one, whose owner then gets a gr.Error saying that their session expired (once; the next call
  starts afresh).
- `free(session_id)` drops a session (wired to `demo.unload`); a running training is stopped.
- `job` is a non-blocking per-session lock: a second heavy call while one runs gets a gr.Error
  naming the running job, instead of queueing or racing on the same model.

Each tab owns its own `Session` fields and only reads the others (see the class).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
import torch

SWEEP_EVERY_S = 30.0  # sweeping is O(sessions); no need to do it on every request
EXPIRED_MEMORY = 1000  # how many expired session ids we remember, to tell their owners


def _entropy_generator() -> torch.Generator:
    generator = torch.Generator()
    generator.seed()  # non-deterministic: two sessions never share a random stream
    return generator


@dataclass
class Session:
    """One user's state. Fields are written by the tab named in the comment, read by all."""

    id: str
    model: Any = None  # core.model.GPT | None (Train tab; a loaded checkpoint)
    tokenizer: Any = None  # core.tokenizers.Tokenizer | None (Train tab)
    trainer: Any = None  # core.train.Trainer | None: keeps the optimizer, so Train continues (Train)
    resume_state: Any = None  # an uploaded checkpoint's training state, for the next Train (Train)
    train_config: Any = None  # core.train.TrainConfig | None of the last run (Train)
    corpus_name: str | None = None  # what the model was trained on, for display (Train)
    model_key: Any = None  # what identifies "the same model" for Train-to-continue (Train)
    history: list[dict] = field(default_factory=list)  # step/train_loss/val_loss/lr rows (Train)
    # Randomness is per session so one user's draws do not depend on another's activity;
    # each session starts from fresh OS entropy (a seed given in the UI overrides it per call).
    generator: torch.Generator = field(default_factory=_entropy_generator)
    last_text: str = ""  # last generated text, offered by the Attention tab (Generate)
    last_steps: list = field(default_factory=list)  # core.sample.TokenStep of last_text's tokens (Generate)
    attention: Any = None  # the Attention tab's last analysis
    baby: Any = None  # the Baby GPT tab's own state object
    last_used: float = field(default_factory=time.monotonic)
    job_name: str | None = None  # the heavy job running now, if any (registry)
    stop_requested: bool = False  # Stop pressed; checked between training steps (Train)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def busy(self) -> bool:
        return self.job_name is not None

    def stop_work(self) -> None:
        """Ask a running training to stop at its next step (thread-safe, never blocks)."""
        self.stop_requested = True
        if self.trainer is not None:
            self.trainer.stop()


def session_id(request: gr.Request | str) -> str:
    """The session key of a request (tests and notebooks may pass the key itself)."""
    if isinstance(request, str):
        return request
    key = getattr(request, "session_hash", None)
    if not key:
        raise gr.Error("This call has no session; call it through the Gradio queue (gradio_client or a browser).")
    return key


class SessionRegistry:
    """Thread-safe map session id -> Session with a cap, a time-to-live, and per-session jobs."""

    def __init__(self, max_sessions: int, ttl_s: float, clock=time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._expired: OrderedDict[str, str] = OrderedDict()  # id -> why, told to its owner once
        self._lock = threading.Lock()
        self._last_sweep = clock()
        self._on_free: list = []

    def on_free(self, callback) -> None:
        """Call `callback(session_id)` whenever a session is freed, swept or evicted (e.g. to delete
        its files). Callbacks run outside the registry's lock and must not raise."""
        self._on_free.append(callback)

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, request: gr.Request | str) -> bool:
        return session_id(request) in self._sessions

    def get(self, request: gr.Request | str) -> Session:
        """This request's session, created on first use; gr.Error once if it was evicted or expired."""
        key = session_id(request)
        now = self._clock()
        freed: list[str] = []
        try:
            with self._lock:
                if now - self._last_sweep >= SWEEP_EVERY_S:
                    freed += self._sweep_locked(now)
                why = self._expired.pop(key, None)
                if why is not None:
                    raise gr.Error(
                        f"Your session expired: {why} Your model is gone; start again (Train or upload a checkpoint)."
                    )
                session = self._sessions.get(key)
                if session is None:
                    freed += self._make_room_locked()
                    session = self._sessions[key] = Session(id=key, last_used=now)
                self._sessions.move_to_end(key)
                session.last_used = now
                return session
        finally:
            self._notify(freed)

    def peek(self, request: gr.Request | str) -> Session | None:
        """The session if it exists, without creating it or refreshing its time."""
        with self._lock:
            return self._sessions.get(session_id(request))

    def touch(self, session: Session) -> None:
        """Mark a session as used now (long jobs call this so the sweep leaves them alone)."""
        with self._lock:
            session.last_used = self._clock()
            if session.id in self._sessions:
                self._sessions.move_to_end(session.id)

    @contextlib.contextmanager
    def job(self, request: gr.Request | str, name: str) -> Iterator[Session]:
        """Run one heavy job in this session; a second one at the same time gets a gr.Error."""
        session = self.get(request)
        if not session._lock.acquire(blocking=False):
            raise gr.Error(
                f"This session is already running {session.job_name or 'a job'}; "
                "wait for it to finish or press Stop."
            )
        session.job_name = name
        try:
            yield session
        finally:
            session.job_name = None
            session.last_used = self._clock()
            session._lock.release()

    def free(self, request: gr.Request | str) -> None:
        """Drop a session now (its tab closed); a running training stops at its next step."""
        key = session_id(request)
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is not None:
            session.stop_work()
            self._notify([key])

    def sweep(self) -> int:
        """Free sessions idle for longer than the TTL; returns how many were freed."""
        with self._lock:
            freed = self._sweep_locked(self._clock())
        self._notify(freed)
        return len(freed)

    def _sweep_locked(self, now: float) -> list[str]:
        self._last_sweep = now
        stale = [s for s in self._sessions.values() if now - s.last_used > self.ttl_s and not s.busy]
        for session in stale:
            self._evict_locked(session, f"it was idle for more than {self.ttl_s / 60:.0f} minutes.")
        return [s.id for s in stale]

    def _notify(self, freed: list[str]) -> None:
        for key in freed:
            for callback in self._on_free:
                callback(key)

    def _make_room_locked(self) -> list[str]:
        if len(self._sessions) < self.max_sessions:
            return []
        idle = next((s for s in self._sessions.values() if not s.busy), None)  # least recent first
        if idle is None:
            raise gr.Error(
                f"The server is full: all {self.max_sessions} sessions are training right now. "
                "Try again in a minute."
            )
        self._evict_locked(
            idle, f"the server holds at most {self.max_sessions} sessions and yours was the least recently used."
        )
        return [idle.id]

    def _evict_locked(self, session: Session, why: str) -> None:
        del self._sessions[session.id]
        session.stop_work()
        self._expired[session.id] = why
        while len(self._expired) > EXPIRED_MEMORY:
            self._expired.popitem(last=False)
