"""Per-session server-side state: each browser tab's model, trainer and history.

Models never live in `gr.State` (a closed tab keeps that for an hour). Instead every handler
looks its session up by `request.session_hash`, which Gradio gives each browser tab and each
gradio_client `Client`:

    session = ctx.registry.get(request)       # created on first use; raises gr.Error if it expired
    ctx.registry.claim_model(session, nbytes)  # before giving it a model: may make room, or refuse
    with ctx.registry.job(request, "training") as session:
        ...                                    # at most one heavy job per session at a time

The session hash is chosen by the client, so it is only ever a dictionary key (checked for
length): every file a session writes is named by `Session.id`, a random id made here.

Policy (a flood of cheap calls must not push out anybody's model):
- A session starts *light*: it holds nothing worth keeping. Light sessions do not count
  towards the memory budget; at most `max_light_sessions` exist, the least recently used light one
  goes first, and each is freed after `api_ttl_s` idle.
- `claim_model(session, nbytes)` gives a session `nbytes` of the `memory_budget` for models before it
  trains, loads a checkpoint or trains a baby GPT (`training_bytes`: weights, gradients and AdamW's
  two moments); it keeps them until it is freed. A room of tiny models fits many times over; when a
  claim does not fit, the least recently used models not working now make room: one the store can
  keep (`keep_aside`, given by the tab that can save it) is set aside after `set_aside_idle_s` idle and
  comes back on its owner's next call; one it cannot keep goes only after `evict_idle_s` idle (its
  owner is told once). If that is not enough, the newcomer is told the server is full. So only
  another learner's model can push a model out of memory, and none is lost while the store works.
- A session whose page is open in a browser (`mark_browser`, from the page's load event) keeps its
  model for `ttl_s` idle and is freed when the tab closes (`free`, wired to `demo.unload`); one
  used over the API alone has no heartbeat, so it is freed after `api_ttl_s` idle.
- When nothing else can keep a closed tab's model (no working store: `keep_closed`, given by the tab that
  knows), the session stays *closed* instead, for `api_ttl_s` idle, so a reload of the same browser takes
  the model back (`reopen`, by its browser's token); it is the first to go when a claim needs room.
- `job` is a non-blocking per-session lock: a second heavy call while one runs gets a gr.Error
  naming the running job, instead of queueing or racing on the same model.
- Freed sessions' memory is handed back (`release_memory`): garbage collected, and glibc's heap
  trimmed so the process's RSS falls back too.

Each tab owns its own `Session` fields and only reads the others (see the class). Each field has a real
type: core's, or a dataclass declared here for a tab's own state (`Analysis`, `BabyState`), since the
tabs keep their state here, not the other way round.

Never imports a tab, the context or a figure (not even for a type: a tab imports this module).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import math
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gradio as gr
import torch

from core.config import GPTConfig, TrainConfig, stage_of
from core.runs import COMPARED, RunLog

if TYPE_CHECKING:  # for the fields' types only: importing these runs the model, training and data code
    from core.attention import HeadSummary
    from core.attribution import HeadEffects
    from core.babygpt import BabyRun
    from core.data import Task
    from core.ladder import Ladder
    from core.model import GPT
    from core.movie import AttentionMovie
    from core.sample import TokenStep
    from core.tokenizers import Tokenizer
    from core.train import Trainer

SWEEP_EVERY_S = 30.0  # sweeping is O(sessions); no need to do it on every request
EXPIRED_MEMORY = 1000  # how many expired session keys we remember, to tell their owners
MAX_KEY_CHARS = 128  # Gradio's session hashes are about 11 characters; a key is kept in memory


def _entropy_generator() -> torch.Generator:
    generator = torch.Generator()
    generator.seed()  # non-deterministic: two sessions never share a random stream
    return generator


def _server_id() -> str:
    return secrets.token_hex(16)


BLOCKLESS_TITLES = {"bigram": "a bigram model", "positions": "a bigram model with position embeddings"}


def model_title(config: GPTConfig) -> str:
    """'a bigram model', 'a 2-layer model with 4 heads': what a learner would call it."""
    title = BLOCKLESS_TITLES.get(stage_of(config))
    if title:
        return title
    heads = "1 head" if config.n_head == 1 else f"{config.n_head} heads"
    return f"a {config.n_layer}-layer model with {heads}"


def missing_parts(config: GPTConfig) -> list[str]:
    """What a model with attention was built without (the Train tab's break-it switches, off), named as
    Compare names them: "causal mask", "√d scaling", "positions". None for a model without attention: its
    title says what it is."""
    if not config.use_attention:
        return []
    off = {"causal": not config.causal, "scale_attention": not config.scale_attention,
           "position": not config.use_position_embedding}
    return [COMPARED[name] for name, missing in off.items() if missing]


def listed(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(filter(None, [", ".join(words[:-1]), words[-1]])) if words else ""


@dataclass
class TrainedModel:
    """A session's GPT and what came with it: the Train tab makes it (training, or a loaded
    checkpoint) and continues it; Generate and Attention read its model and tokenizer. (A view over
    a pretrained model is one too, without trainer or history: see playground.pretrained.)"""

    model: GPT
    tokenizer: Tokenizer
    corpus_name: str  # what it was trained on, for display
    history: list[dict] = field(default_factory=list)  # step/train_loss/val_loss/lr rows
    trainer: Trainer | None = None  # keeps the optimizer, so Train continues
    train_config: TrainConfig | None = None  # of the last run
    resume_state: dict | None = None  # an uploaded checkpoint's training state, for the next Train
    movie: AttentionMovie | None = None  # its attention over training, continued by Train
    run: int = 0  # its number among the session's runs (core.runs.RunLog), to compare; 0: not a run yet
    source: str | None = None  # a pretrained model's key (playground.pretrained.CATALOGUE); None: the session's own
    task: Task | None = None  # the synthetic task it last trained on, whose lines Generate writes
    sample: str = ""  # the last live sample the Train tab showed: the store keeps it, a page coming back shows it

    @property
    def step(self) -> int:
        """How many steps the model has trained."""
        if self.trainer is not None:
            return self.trainer.step
        return self.history[-1]["step"] if self.history else 0

    def describe(self) -> str:
        """One line about the model, shown by other tabs."""
        c, title, missing = self.model.config, model_title(self.model.config), missing_parts(self.model.config)
        built = f", built without {listed(['the ' + part for part in missing])}" if missing else ""
        return (f"{title[0].upper()}{title[1:]}, {c.n_embd} channels, context {c.block_size}, "
                f"vocabulary {c.vocab_size:,}{built}; trained {self.step} steps on {self.corpus_name}.")

    def training_state(self) -> dict | None:
        """What Train continues from: the live trainer's state, or an uploaded checkpoint's (or None)."""
        return self.trainer.state_dict() if self.trainer is not None else self.resume_state


@dataclass(frozen=True)
class Analysis:
    """The Attention tab's state: the last analysed text of a session, and what the tools below the heatmaps
    found in it."""

    ids: list[int]
    labels: list[str]  # readable token labels
    maps: torch.Tensor  # (L, H, T, T) float16: half the memory a session keeps; ~4 significant digits
    summaries: list[HeadSummary]
    trained: weakref.ReferenceType[TrainedModel]  # the session's model then (weak: a replaced one must go)
    step: int  # ... and its training step then
    # each head's measured effect on the answer at the text's last token, for the summary: direct attribution
    # when analysed, patching's shares once this text is patched (None: no shares, e.g. a too-close answer)
    effects: HeadEffects | None = None
    # the latest result of each tool, for the export: "steps" (HeadSteps), "knock_out" (a dict),
    # "importance" ({mode: (L, H) tensor}), "lens" (LogitLens); and "intact", the continuation of
    # the text with every head, the same for every knock-out of this analysis
    results: dict = field(default_factory=dict)

    def weights(self) -> torch.Tensor:
        return self.maps.float()

    def of(self, trained: TrainedModel | None) -> bool:
        """Whether this analysis shows `trained` as it is now: the same model, trained no further."""
        return trained is not None and self.trained() is trained and self.step == trained.step


@dataclass(frozen=True)
class Problem:
    """Why the session's last Train ended in an error: `refused` before it began (the server full, a bad form),
    or an error while it trained (Train; a room's class view shows it)."""

    refused: bool
    message: str


@dataclass
class BabyState:
    """The Baby GPT tab's state: a session's baby GPT, its run and the last sampled walk on its chain."""

    run: BabyRun
    walk: list[int] | None = None


@dataclass
class Session:
    """One user's state. Fields are written by the tab named in the comment, read by all."""

    key: str  # the client's session hash: a dictionary key only, never part of a path
    id: str = field(default_factory=_server_id)  # made here: names the session's files
    trained: TrainedModel | None = None  # the session's GPT, if it has one (Train)
    # The session's own view over one of the server's shared pretrained models while Generate and Attention read it
    # instead of `trained` (playground.pretrained; Train sets it back to None when it makes a model).
    pretrained: TrainedModel | None = None
    # Randomness is per session so one user's draws do not depend on another's activity;
    # each session starts from fresh OS entropy (a seed given in the UI overrides it per call).
    generator: torch.Generator = field(default_factory=_entropy_generator)
    last_text: str = ""  # last generated text, offered by the Attention tab (Generate)
    last_steps: list[TokenStep] = field(default_factory=list)  # of last_text's tokens (Generate)
    attention: Analysis | None = None  # its last analysis (Attention)
    baby: BabyState | None = None  # its baby GPT (Baby GPT)
    ladder: Ladder | None = None  # its last climb, running or done (Ladder)
    runs: RunLog = field(default_factory=RunLog)  # its last few runs, to compare (Train)
    token: str | None = None  # its browser's key to the state store, checked (Train: playground.tabs.train.restore)
    kept_form: dict | None = None  # the Train form of its model's last run, kept with it in the store (Train)
    last_used: float = field(default_factory=time.monotonic)
    holds_model: bool = False  # holds part of the registry's memory budget for models (registry)
    held_bytes: int = 0  # ... this much (registry)
    browser: bool = False  # its page is open in a browser, so a heartbeat will tell us when it closes (registry)
    closed: bool = False  # its page closed, but it stays for a reload of it: nothing else keeps its model (registry)
    job_name: str | None = None  # the heavy job running now, if any (registry)
    stop_requested: bool = False  # Stop pressed; checked between training steps (Train)
    train_problem: Problem | None = None  # why its last Train failed; None once one runs (Train)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def model(self) -> GPT | None:
        """The session's GPT, or None."""
        return None if self.trained is None else self.trained.model

    @property
    def tokenizer(self) -> Tokenizer | None:
        return None if self.trained is None else self.trained.tokenizer

    @property
    def reading(self) -> TrainedModel | None:
        """What Generate and Attention read: a pretrained model when chosen, else the session's own model."""
        return self.pretrained or self.trained

    @property
    def trainer(self) -> Trainer | None:
        return None if self.trained is None else self.trained.trainer

    @property
    def busy(self) -> bool:
        return self.job_name is not None

    def stop_work(self) -> None:
        """Ask a running training or ladder to stop at its next step (thread-safe, never blocks)."""
        self.stop_requested = True
        if self.trainer is not None:
            self.trainer.stop()
        if self.ladder is not None:
            self.ladder.stop()


def training_bytes(n_params: int) -> int:
    """Memory a model of `n_params` takes while it trains: float32 weights, gradients and AdamW's two moments."""
    return 16 * n_params


def session_key(request: gr.Request | str) -> str:
    """The session key of a request (tests and notebooks may pass the key itself)."""
    key = request if isinstance(request, str) else getattr(request, "session_hash", None)
    if not key or not isinstance(key, str):
        raise gr.Error("This call has no session; call it through the Gradio queue (gradio_client or a browser).",
                       print_exception=False)
    if len(key) > MAX_KEY_CHARS:
        raise gr.Error(f"The session hash is {len(key):,} characters long; at most {MAX_KEY_CHARS} are accepted.",
                       print_exception=False)
    return key


def release_memory() -> None:
    """Give freed memory back to the system: collect cycles, then trim glibc's heap (elsewhere a no-op).

    Without the trim, a Python process keeps the pages of freed tensors and its RSS never falls."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


# glibc's mallopt parameters (malloc.h) and the values the app sets: see `reuse_freed_memory`
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest: blocks this big (a model's weights) still go back at once
TRIM_THRESHOLD_BYTES = 128 << 20


def reuse_freed_memory() -> None:
    """Have glibc keep freed blocks under 32 MB for reuse instead of handing each back to the system.

    By default a block over 128 kB (a training step's activations: a few MB each) is mapped for its
    allocation and unmapped when freed, so every step of every learner faults its pages in afresh. Sixty
    default-task learners stepped by two threads in one process made 975,000 page faults in 1,260 steps and
    spent 11% of their CPU in the kernel; with these thresholds 83,000 and 3%. In a whole room the effect
    was within the noise, at about 150 MB more RSS at peak (tests/bench/README.md). `release_memory` still
    trims what a freed session leaves."""
    if _LIBC is not None and hasattr(_LIBC, "mallopt"):
        _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        _LIBC.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()


class SessionRegistry:
    """Thread-safe map session key -> Session with a memory budget for models, time-to-live and per-session jobs
    (the policy is in the module docstring)."""

    def __init__(self, memory_budget: int, ttl_s: float, *, api_ttl_s: float = 600.0, evict_idle_s: float = 600.0,
                 set_aside_idle_s: float = 5.0, max_light_sessions: int = 1000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.memory_budget = memory_budget  # bytes for every session's model together
        self.set_aside_idle_s = set_aside_idle_s  # a model the store keeps may leave memory after this idle
        self.ttl_s = ttl_s
        self.api_ttl_s = api_ttl_s
        self.evict_idle_s = evict_idle_s
        self.max_light_sessions = max_light_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        # key -> (why, token): told to its owner once; with the token of a model set aside in the store,
        # which comes back instead
        self._expired: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._last_sweep = clock()
        self._on_free: list[Callable[[Session], None]] = []
        self._offload: Callable[[Session], bool] | None = None
        self._return: Callable[[Session], bool] | None = None
        self._keep_closed: Callable[[Session], bool] | None = None

    def on_free(self, callback: Callable[[Session], None]) -> None:
        """Call `callback(session)` whenever a session is freed, swept or evicted (e.g. to delete
        its files, named by `session.id`). Callbacks run outside the registry's lock and must not raise."""
        self._on_free.append(callback)

    def keep_aside(self, offload: Callable[[Session], bool], bring_back: Callable[[Session], bool]) -> None:
        """How a model leaves memory without being lost: `offload(session)` keeps it elsewhere (the state
        store) and says whether it did; `bring_back(session)` (a new session with the old one's token)
        puts it back and says whether it could. Both run outside the registry's lock."""
        self._offload, self._return = offload, bring_back

    def keep_closed(self, keep: Callable[[Session], bool]) -> None:
        """When a tab closes, `keep(session)` says whether its model has nowhere else to go (no store keeps it):
        then the session stays, closed, for a reload of the same browser to `reopen`. Runs outside the lock."""
        self._keep_closed = keep

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, request: gr.Request | str) -> bool:
        return session_key(request) in self._sessions

    def keys(self) -> set[str]:
        """The session keys held now (a snapshot)."""
        with self._lock:
            return set(self._sessions)

    def counts(self) -> dict[str, int]:
        """How many sessions exist, how many of them hold a model, and the bytes those claim."""
        with self._lock:
            holders = [s for s in self._sessions.values() if s.holds_model]
            return {"sessions": len(self._sessions), "models": len(holders),
                    "model_bytes": sum(s.held_bytes for s in holders)}

    def get(self, request: gr.Request | str) -> Session:
        """This request's session, created (light) on first use; gr.Error once if its model was
        evicted or expired."""
        key = session_key(request)
        now = self._clock()
        freed: list[Session] = []
        try:
            with self._lock:
                if now - self._last_sweep >= SWEEP_EVERY_S:
                    freed += self._sweep_locked(now)
                why, token = self._expired.pop(key, (None, None))
                if why is not None and token is None:
                    raise gr.Error(
                        f"Your session expired: {why} Your model is gone; start again (Train or upload a checkpoint).",
                        print_exception=False,
                    )
                session = self._sessions.get(key)
                if session is None:
                    freed += self._make_light_room_locked()
                    session = self._sessions[key] = Session(key=key, last_used=now, token=token)
                self._sessions.move_to_end(key)
                session.last_used, session.closed = now, False  # a closed page's own call: in use again
        finally:
            self._notify(freed)
        if token is not None:  # its model was set aside: back from the store now
            try:
                back = self._return is not None and self._return(session)
            except gr.Error:  # no room yet (the server is full): the next call tries again
                with self._lock:
                    if self._sessions.get(key) is session and not session.holds_model:
                        del self._sessions[key]
                    self._remember_locked(key, why, token)
                raise
            if not back:
                raise gr.Error(f"Your session expired: {why} It could not be brought back from the server's "
                               "storage; start again (Train or upload a checkpoint).", print_exception=False)
        return session

    def peek(self, request: gr.Request | str) -> Session | None:
        """The session if it exists, without creating it or refreshing its time."""
        with self._lock:
            return self._sessions.get(session_key(request))

    def mark_browser(self, request: gr.Request | str) -> None:
        """This session's page is open in a browser: its heartbeat frees it when the tab closes."""
        self.get(request).browser = True

    def touch(self, session: Session) -> None:
        """Mark a session as used now (long jobs call this so the sweep leaves them alone)."""
        with self._lock:
            session.last_used = self._clock()
            if session.key in self._sessions:
                self._sessions.move_to_end(session.key)

    def claim_model(self, session: Session, nbytes: int) -> None:
        """Give `session` `nbytes` of the memory for models (before it gets a model of that size), making
        room if needed (see the module docstring); gr.Error if the server is full."""
        unkept: set[str] = set()  # sessions the store could not take
        while True:
            with self._lock:
                needed = self._held_locked(exclude=session) + nbytes - self.memory_budget
                if needed <= 0:
                    session.holds_model, session.held_bytes = True, max(nbytes, 1)
                    return
                now = self._clock()
                others = [s for s in self._sessions.values() if s.holds_model and s is not session and not s.busy]
                aside = next((s for s in others if s.token and s.key not in unkept and self._offload is not None
                              and now - s.last_used >= self.set_aside_idle_s), None)
                # a closed tab's model goes first: it was kept only while nobody needed the room
                idle = next((s for s in others if s.closed), None) or \
                    next((s for s in others if now - s.last_used >= self.evict_idle_s), None)
                if aside is None and idle is None:
                    held = self._held_locked(exclude=session)
                    raise gr.Error(
                        f"The server is full: the models held now take {held / 2**20:,.0f} MB of its "
                        f"{self.memory_budget / 2**20:,.0f} MB for models, and none has been idle long enough to "
                        f"make room. {self._room_in(others, unkept, now)}, or train a smaller model.",
                        print_exception=False)
            if aside is not None:
                if self._offload(aside):
                    self._set_aside(aside)
                else:
                    unkept.add(aside.key)
                continue
            with self._lock:
                victim = idle if idle is not None and idle.key in self._sessions else None
                if victim is None:
                    continue
                self._evict_locked(victim, "the server's memory for models was full and yours had been idle "
                                           f"longest (over {self.evict_idle_s / 60:.0f} minutes).")
            self._notify([victim])

    def _room_in(self, others: list[Session], unkept: set[str], now: float) -> str:
        """When to try again: as soon as one of `others` (held, not training) may leave memory, set aside to
        the store or evicted as idle; while every model is training, when a run ends."""
        waits = [(self.set_aside_idle_s if s.token and s.key not in unkept and self._offload is not None
                  else self.evict_idle_s) - (now - s.last_used) for s in others]
        if not waits:
            return "Every model held now is training: room frees as a run ends. Try again in a minute"
        wait = max(1, math.ceil(min(waits)))
        return f"Try again in {wait} seconds" if wait < 120 else f"Try again in {math.ceil(wait / 60)} minutes"

    def _held_locked(self, exclude: Session | None = None) -> int:
        return sum(s.held_bytes for s in self._sessions.values() if s.holds_model and s is not exclude)

    def _set_aside(self, session: Session) -> None:
        """Drop a model the store now keeps: its owner's next call brings it back (`keep_aside`)."""
        with self._lock:
            if self._sessions.get(session.key) is not session or session.busy:
                return
            del self._sessions[session.key]
            self._remember_locked(session.key, "the server needed its memory for models and yours was idle; it "
                                               "was kept in storage.", session.token)
        self._notify([session])

    def _remember_locked(self, key: str, why: str, token: str | None) -> None:
        """Tell the owner of `key` `why` on their next call (once), bringing back what `token` keeps."""
        self._expired[key] = (why, token)
        while len(self._expired) > EXPIRED_MEMORY:
            self._expired.popitem(last=False)

    @contextlib.contextmanager
    def job(self, request: gr.Request | str, name: str) -> Iterator[Session]:
        """Run one heavy job in this session; a second one at the same time gets a gr.Error."""
        session = self.get(request)
        if not session._lock.acquire(blocking=False):
            raise gr.Error(
                f"This session is already running {session.job_name or 'a job'}; "
                "wait for it to finish or press Stop.", print_exception=False,
            )
        session.job_name = name
        try:
            yield session
        finally:
            session.job_name = None
            session.last_used = self._clock()
            session._lock.release()

    def free(self, request: gr.Request | str) -> None:
        """Drop a session now (its tab closed), or keep it closed for a reload (`keep_closed`); a running
        training stops at its next step."""
        session = self.peek(request)
        if session is None:
            return
        session.stop_work()
        keep = (self._keep_closed is not None and session.holds_model and session.token is not None
                and self._keep_closed(session))
        with self._lock:
            if self._sessions.get(session.key) is not session:
                return
            if keep:
                session.closed, session.browser, session.last_used = True, False, self._clock()
                return
            del self._sessions[session.key]
        self._notify([session])

    def reopen(self, session: Session) -> Session | None:
        """The closed session that a tab of the same browser (`session.token`) left (`keep_closed`), taken out
        of the registry with its files (`on_free`); its claim on the memory for models is now `session`'s, and
        the caller moves its model over. None if there is none (or `session` holds a model already)."""
        token = session.token
        with self._lock:
            closed = next((s for s in self._sessions.values() if s.closed and s.token and not s.busy
                           and secrets.compare_digest(s.token, token or "")), None)
            if closed is None or session.holds_model:
                return None
            del self._sessions[closed.key]
            session.holds_model, session.held_bytes = True, closed.held_bytes
            closed.holds_model = False  # its memory is `session`'s now: nothing to hand back to the system
        self._notify([closed])
        return closed

    def sweep(self) -> int:
        """Free sessions idle for longer than their time-to-live; returns how many were freed."""
        with self._lock:
            freed = self._sweep_locked(self._clock())
        self._notify(freed)
        return len(freed)

    def _ttl(self, session: Session) -> float:
        return self.ttl_s if session.browser and session.holds_model else self.api_ttl_s

    def _sweep_locked(self, now: float) -> list[Session]:
        self._last_sweep = now
        stale = [s for s in self._sessions.values() if now - s.last_used > self._ttl(s) and not s.busy]
        for session in stale:
            self._evict_locked(session, f"it was idle for more than {self._ttl(session) / 60:.0f} minutes.")
        return stale

    def _make_light_room_locked(self) -> list[Session]:
        """Room for one more light session: the least recently used light one goes (nothing is lost)."""
        light = [s for s in self._sessions.values() if not s.holds_model and not s.busy]
        excess = light[: max(0, len(light) - self.max_light_sessions + 1)]
        for session in excess:
            self._evict_locked(session, "")
        return excess

    def _notify(self, freed: list[Session]) -> None:
        if not freed:
            return
        for session in freed:
            for callback in self._on_free:
                callback(session)
        if any(s.holds_model for s in freed):  # light sessions hold too little to be worth a collection
            release_memory()

    def _evict_locked(self, session: Session, why: str) -> None:
        """Drop a session; the owner of a model is told `why` on their next call (once)."""
        del self._sessions[session.key]
        session.stop_work()
        if session.holds_model and not session.closed:  # nobody comes back with a closed tab's key
            self._remember_locked(session.key, why, None)
