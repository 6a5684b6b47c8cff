"""Rooms: a teacher's class on one server. Learners join through the room's link, the teacher's class view
reads what their trainings already compute, and a lesson the teacher pushes reaches every learner's form.

    rooms = Rooms(registry, max_rooms=20, max_learners=200, idle_s=3 * 3600)
    room, key = rooms.open("Workshop A")          # the key opens the class view; only the teacher has it
    member = rooms.join(room.code, "abc123")       # a learner's session key; a short anonymous name
    rooms.rename("abc123", "Ada")
    room = rooms.teacher(room.code, key)           # gr.Error without the right key (compared in constant time)
    rooms.push(room, Lesson(values, hide, lock, said))   # every learner's page finds it at its next ask (`asked`)
    for member, progress in rooms.progress(room):  # name, state, step, losses, answers, head formed at ...
        ...
    rooms.close(room)

What a room holds is bounded: at most `max_learners` members (a join past it is refused), names of at most
NAME_CHARS characters from a safe set (they are drawn in charts and tables), a room name of at most
ROOM_NAME_CHARS, one lesson (a checked form), and for each member a copy of their last progress with its curve
thinned to EXPORT_POINTS points (kept after the learner's session is gone: the results stay). A server holds at
most `max_rooms` rooms; a room ends when its teacher closes it or after `idle_s` with no call from anyone in it.

Every request's field is untrusted: a code or key is only compared (a key by its SHA-256, in constant time),
a name only shown; nothing becomes a path. A learner sees only their own room's name, their own name and the
lesson; the class view never shows a learner's text (a pasted corpus's tokens are left off their map).

A room lives in this server's memory, like the trainings it reads: a restart ends it (each learner's model
comes back from the state store; the teacher opens a new room), and a room's learners must reach the same
replica (README, "Hosting it").

Reads the sessions (`playground.sessions`) and core's movie. Never imports a tab or a figure.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import gradio as gr

from core.data import CORPORA
from core.movie import copying_onset, evenly
from core.tokenizers import token_labels
from playground.sessions import Session, SessionRegistry

CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"  # no 0, 1, I, L or O to misread on a projector
CODE_CHARS = 8  # about 40 random bits: a room cannot be guessed in a workshop's day
ROOM_NAME_CHARS = 60
NAME_CHARS = 24
# Letters of any script, digits, spaces and a few marks: safe in Markdown, Plotly's legend and a CSV.
NAME = re.compile(r"[^\W_](?:(?:[^\W_]|[ .'-])*[^\W_])?")
KEY_CHARS = 200  # of a teacher key, set on the server or typed
STUCK_S = 60.0  # a learner whose step has not moved for this long (and is not done) is stuck
# A member without a session whose page has not asked for the lesson for this long (a page asks every few
# seconds) has closed it: they count as left, and a full room makes room of them. A page still open keeps its
# place even when its session (holding no model yet) was dropped, so a flood of sessions cannot push it out.
# Chromium wakes the timers of a tab hidden for five minutes once a minute: two of those, and some.
GONE_S = 150.0
ENDED = -1  # what a page's ask finds once its room has ended or its learner left (`Rooms.asked`)
TICKET_BYTES = 16  # of the random ticket a learner's page asks with: it names their place, never their session
EXPORT_POINTS = 500  # of each learner's training curve kept and exported
STATES = ("joined", "training", "stopped", "done", "refused", "error", "left")
ADJECTIVES = ("Amber", "Azure", "Brave", "Calm", "Clever", "Coral", "Crimson", "Eager", "Gentle", "Golden",
              "Jade", "Lively", "Lucky", "Misty", "Nimble", "Quiet", "Rapid", "Silver", "Sunny", "Swift")
ANIMALS = ("Badger", "Crane", "Dolphin", "Falcon", "Fox", "Gecko", "Heron", "Ibex", "Koala", "Lynx", "Marten",
           "Newt", "Otter", "Owl", "Panda", "Puffin", "Raven", "Seal", "Tiger", "Wren")


@dataclass(frozen=True)
class Lesson:
    """What the teacher pushed: the Train form's fields by name (checked by the Train tab's rules), the groups of
    the form hidden and locked (as a teacher's link names them), and what it changed, in words (the banner)."""

    values: dict[str, Any]
    hide: tuple[str, ...] = ()
    lock: tuple[str, ...] = ()
    said: str = ""
    version: int = 0  # 1 for a room's first lesson, one more for each push


@dataclass(frozen=True)
class Progress:
    """One learner as the class view shows them, read from their session."""

    state: str  # one of STATES
    step: int = 0
    max_steps: int = 0
    loss: float | None = None  # the last training loss
    val_loss: float | None = None  # the last validation loss
    answers: float | None = None  # the share of a task's answers right, at the last evaluation
    formed_at: int | None = None  # the step from which some head copies (`core.movie.copying_onset`)
    curve: tuple[tuple[int, ...], tuple[float, ...]] = ((), ())  # steps and training losses, thinned
    val_curve: tuple[tuple[int, ...], tuple[float, ...]] = ((), ())  # steps and validation losses
    problem: str = ""  # the message of a refusal or an error
    run: int = 0  # the learner's run number (a new model is a new run)


@dataclass
class Member:
    key: str  # the learner's session key: a dictionary key only
    name: str
    joined: float
    last: Progress = field(default_factory=lambda: Progress("joined"))  # kept when the session is gone
    moved: float = 0.0  # when `last.step` last changed (or the join): what "stuck" measures
    seen: float = 0.0  # when their page last asked for the lesson (or the join): what "gone" measures
    ticket: str = field(default_factory=lambda: secrets.token_urlsafe(TICKET_BYTES))  # what their page asks with
    left: bool = False
    read_from: tuple | None = None  # what `last` was read from (`reading`): read again only when it changes


@dataclass
class Room:
    code: str
    name: str
    key_digest: bytes  # SHA-256 of the teacher's key: the key itself is never kept
    opened: float
    active: float  # the last call of anyone in it
    members: dict[str, Member] = field(default_factory=dict)  # by session key, in the order they joined
    lesson: Lesson | None = None
    closed: bool = False

    @property
    def present(self) -> list[Member]:
        # a copy first (one step, under the GIL): a join may add a member while the class view reads
        return [member for member in list(self.members.values()) if not member.left]


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def checked_name(value: Any, what: str = "A name") -> str:
    """A learner's name as typed: trimmed, at most NAME_CHARS letters, digits, spaces and .'- (gr.Error else)."""
    if not isinstance(value, str):
        raise gr.Error(f"{what} must be text.")
    name = " ".join(value.split())
    if len(value) > 4 * NAME_CHARS or len(name) > NAME_CHARS:
        raise gr.Error(f"{what} may have at most {NAME_CHARS} characters.")
    if not NAME.fullmatch(name):
        raise gr.Error(f"{what} may hold letters, digits, spaces and . ' - (starting and ending with a letter "
                       "or digit).")
    return name


def checked_code(value: Any) -> str:
    """A room code as typed (any case, dashes and spaces ignored); gr.Error if it cannot be one."""
    if not isinstance(value, str) or len(value) > 4 * CODE_CHARS:
        raise gr.Error("A room code is 8 letters and digits.")
    code = re.sub(r"[\s-]", "", value).upper()
    if len(code) != CODE_CHARS or any(char not in CODE_ALPHABET for char in code):
        raise gr.Error("A room code is 8 letters and digits (no 0, 1, I, L or O).")
    return code


def reading(session: Session) -> tuple:
    """What a learner's progress is read from, in a few numbers that change whenever anything it shows does: the
    model and run, its history rows and snapshots so far, whether it trains, and its last problem. The class view
    reads it every second for each learner; most learners have not moved since the last read."""
    trained = session.trained
    movie = None if trained is None else trained.movie
    frames = () if movie is None else movie.frames
    return (id(trained), None if trained is None else (trained.run, trained.source, len(trained.history)),
            len(frames), frames[-1].step if frames else None, session.job_name, session.train_problem)


def progress_of(session: Session | None, member: Member, curve_points: int = EXPORT_POINTS) -> Progress:
    """What the class view shows of `member`, read from their `session` (None: it is gone, so they have left:
    their last progress stays). Reads what the training already computed: history rows and snapshots."""
    if session is None:
        return replace(member.last, state="left")
    trained, problem = session.trained, session.train_problem
    if trained is None or trained.source is not None:  # nothing trained yet (or GPT-2 picked elsewhere)
        if problem is not None:
            return Progress("refused" if problem.refused else "error", problem=problem.message)
        return Progress("joined")
    history = trained.history
    steps = trained.train_config.max_iters if trained.train_config is not None else trained.step
    trained_rows = [(row["step"], row["train_loss"]) for row in history if row.get("train_loss") is not None]
    evaluated = [row for row in history if row.get("val_loss") is not None]
    scored = next((row for row in reversed(evaluated) if row.get("answer_accuracy") is not None), None)
    if session.job_name == "training":
        state = "training"
    elif problem is not None:
        state = "refused" if problem.refused else "error"
    else:
        state = "done" if trained.step >= steps else "stopped"
    thinned = evenly(trained_rows, curve_points) if len(trained_rows) > 1 else trained_rows
    return Progress(
        state=state, step=trained.step, max_steps=steps,
        loss=trained_rows[-1][1] if trained_rows else None,
        val_loss=evaluated[-1]["val_loss"] if evaluated else None,
        answers=None if scored is None else scored["answer_accuracy"],
        formed_at=None if trained.movie is None else copying_onset(trained.movie),
        curve=(tuple(step for step, _ in thinned), tuple(loss for _, loss in thinned)),
        val_curve=(tuple(row["step"] for row in evaluated), tuple(row["val_loss"] for row in evaluated)),
        problem="" if problem is None else problem.message, run=trained.run,
    )


@dataclass(frozen=True)
class HeadMap:
    """One learner's attention map for the gallery: a head's (T, T) weights on their probe prompt, with the
    prompt's tokens only where their corpus is a built-in one (never a learner's own text)."""

    name: str
    weights: list[list[float]] | None  # None: their model has no such head, or no snapshot yet
    labels: list[str] | None


def head_map(session: Session | None, name: str, layer: int, head: int) -> HeadMap:
    """`name`'s map of `head` in `layer` at their last snapshot (a movie's frame: nothing is computed)."""
    trained = None if session is None else session.trained
    movie = None if trained is None or trained.source is not None else trained.movie
    if movie is None or not movie.frames:
        return HeadMap(name, None, None)
    maps = movie.frames[-1].maps  # (L, H, T, T) float16
    if layer >= maps.size(0) or head >= maps.size(1):
        return HeadMap(name, None, None)
    built_in = (session.kept_form or {}).get("corpus") in CORPORA
    labels = token_labels(trained.tokenizer, movie.probe_ids) if built_in else None
    return HeadMap(name, maps[layer, head].float().tolist(), labels)  # the figure rounds them


class Rooms:
    """The rooms of this server (see the module docstring)."""

    def __init__(self, registry: SessionRegistry, *, max_rooms: int, max_learners: int, idle_s: float,
                 server_key: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.max_rooms, self.max_learners, self.idle_s = max_rooms, max_learners, idle_s
        self.server_key = server_key  # when set, opening a room takes it, and it opens every room's class view
        self._clock = clock
        self._rooms: dict[str, Room] = {}
        self._member_of: dict[str, str] = {}  # session key -> room code
        self._ticket_of: dict[str, str] = {}  # a present member's ticket -> their session key
        self._lock = threading.Lock()
        registry.on_free(self._keep_results)

    def __len__(self) -> int:
        return len(self._rooms)

    # ------------------------------------------------------------------ the teacher's

    def open(self, name: Any, server_key: Any = "") -> tuple[Room, str]:
        """A new room named `name`, and its teacher key: the server's (which `server_key` must then match), or
        a new random one, shown once."""
        if not isinstance(name, str) or len(name) > 4 * ROOM_NAME_CHARS:
            raise gr.Error(f"A room's name is text of at most {ROOM_NAME_CHARS} characters.")
        # control and format characters (NUL, a terminal's escapes, a right-to-left override) count as spaces
        name = " ".join("".join(char if char.isprintable() else " " for char in name).split())
        if not name or len(name) > ROOM_NAME_CHARS:
            raise gr.Error(f"A room's name is text of 1 to {ROOM_NAME_CHARS} characters.")
        if self.server_key:
            if not self._matches(server_key, digest(self.server_key)):
                raise gr.Error("This server opens rooms with its teacher key: the key you gave is not it.")
            key = self.server_key
        else:
            key = secrets.token_urlsafe(18)
        self.sweep()
        now = self._clock()
        with self._lock:
            if len(self._rooms) >= self.max_rooms:
                raise gr.Error(f"This server holds {self.max_rooms} rooms already: close one, or try again once "
                               "an idle one ends.")
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_CHARS))
            while code in self._rooms:
                code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_CHARS))
            room = self._rooms[code] = Room(code, name, digest(key), opened=now, active=now)
        return room, key

    def teacher(self, code: Any, key: Any) -> Room:
        """The room whose code and teacher key these are; gr.Error (the same for a wrong key and for no such
        room, so a key cannot be tried against codes) otherwise."""
        code = checked_code(code)
        room = self._rooms.get(code)
        if room is None or room.closed or not self._matches(key, room.key_digest):
            raise gr.Error("No open room has this code and teacher key.")
        room.active = self._clock()
        return room

    def push(self, room: Room, lesson: Lesson) -> Lesson:
        """Make `lesson` the room's: every learner's next poll applies it (a training goes on)."""
        with self._lock:
            version = room.lesson.version + 1 if room.lesson is not None else 1
            room.lesson = replace(lesson, version=version)
            return room.lesson

    def close(self, room: Room) -> None:
        with self._lock:
            self._end_locked(room)

    def progress(self, room: Room) -> list[tuple[Member, Progress]]:
        """Every member who joined, in the order they joined, with their progress now (see `progress_of`);
        marks who has left and when each last moved."""
        now, shown = self._clock(), []
        for member in list(room.members.values()):
            session = None if member.left else self.registry.peek(member.key)
            if session is None and not member.left and now - member.seen < GONE_S:
                progress = member.last  # a page still open whose session went (it held no model): as it was
            elif session is not None and member.read_from == (source := reading(session)):
                progress = member.last  # nothing it shows has changed since the last read
            else:
                progress = progress_of(session, member)
                member.read_from = None if session is None else source
            if progress.state == "left" and not member.left:
                with self._lock:
                    self._leave_locked(member.key)
            if progress.step != member.last.step or progress.run != member.last.run:
                member.moved = now
            member.last = progress
            shown.append((member, progress))
        return shown

    def stuck(self, member: Member, progress: Progress) -> bool:
        """Whether `member` has made no progress for STUCK_S though not done (nor gone)."""
        return progress.state not in ("done", "left") and self._clock() - member.moved >= STUCK_S

    # ------------------------------------------------------------------ the learner's

    def join(self, code: Any, session_key: str, name: Any = None) -> tuple[Room, Member]:
        """Put the learner (their session key) in the room with `code`, named `name` or a new anonymous name;
        a learner already in it keeps their name, one in another room leaves it. gr.Error: no such room, full."""
        code = checked_code(code)
        name = None if name in (None, "") else checked_name(name)
        now = self._clock()
        with self._lock:
            room = self._rooms.get(code)
            if room is None or room.closed:
                raise gr.Error("No open room has this code: ask your teacher for the room's link.")
            member = room.members.get(session_key)
            if member is not None and not member.left:
                room.active = member.seen = now
                return room, member
            if len(room.present) >= self.max_learners:  # those gone (GONE_S) make room first
                for gone in [m for m in room.present
                             if now - m.seen >= GONE_S and self.registry.peek(m.key) is None]:
                    self._leave_locked(gone.key)
            if len(room.present) >= self.max_learners:
                raise gr.Error(f"This room is full ({self.max_learners} learners).")
            if len(room.members) >= 2 * self.max_learners:  # those who left count too, up to a bound
                self._forget_left_locked(room)
            self._leave_locked(session_key)
            taken = {m.name for m in room.present}
            name = name if name is not None and name not in taken else self._new_name(taken)
            member = room.members[session_key] = Member(session_key, name, joined=now, moved=now, seen=now)
            self._member_of[session_key] = code
            self._ticket_of[member.ticket] = session_key
            room.active = now
            return room, member

    def membership(self, session_key: str) -> tuple[Room, Member] | None:
        """The learner's room and their place in it, if they are in an open one (marks the room active)."""
        code = self._member_of.get(session_key)
        room = None if code is None else self._rooms.get(code)
        member = None if room is None else room.members.get(session_key)
        if member is None or member.left or room.closed:
            return None
        room.active = member.seen = self._clock()
        return room, member

    def asked(self, ticket: Any) -> int:
        """What a learner's page finds when it asks with its ticket (`Member.ticket`) every few seconds: the
        version of its room's lesson (0: none yet), or ENDED once the room has ended or the learner left. Marks
        the page as open (GONE_S). Dictionary lookups only, without the lock: a room's pages ask often."""
        session_key = self._ticket_of.get(ticket) if isinstance(ticket, str) else None
        joined = None if session_key is None else self.membership(session_key)
        if joined is None:
            return ENDED
        lesson = joined[0].lesson
        return 0 if lesson is None else lesson.version

    def rename(self, session_key: str, name: Any) -> Member:
        name = checked_name(name)
        with self._lock:
            joined = self.membership(session_key)
            if joined is None:
                raise gr.Error("You are not in a room: join one through your teacher's link.")
            room, member = joined
            if any(other.name == name and other is not member for other in room.present):
                raise gr.Error(f"Someone in this room is called {name} already: choose another name.")
            member.name = name
            return member

    def leave(self, session_key: str) -> None:
        with self._lock:
            self._leave_locked(session_key)

    # ------------------------------------------------------------------ upkeep

    def _keep_results(self, session: Session) -> None:
        """A learner's session is gone (their tab closed, or evicted): keep their progress as it was, for the
        class view and the export, even if no view read it since their last step."""
        code = self._member_of.get(session.key)
        room = None if code is None else self._rooms.get(code)
        member = None if room is None else room.members.get(session.key)
        if member is not None and not member.left:
            member.last = progress_of(session, member)

    def sweep(self) -> None:
        """End the rooms idle for `idle_s`."""
        now = self._clock()
        with self._lock:
            for room in [room for room in self._rooms.values() if now - room.active >= self.idle_s]:
                self._end_locked(room)

    def _end_locked(self, room: Room) -> None:
        room.closed = True
        self._rooms.pop(room.code, None)
        for key, member in room.members.items():
            self._ticket_of.pop(member.ticket, None)
            if self._member_of.get(key) == room.code:
                del self._member_of[key]

    def _leave_locked(self, session_key: str) -> None:
        code = self._member_of.pop(session_key, None)
        room = None if code is None else self._rooms.get(code)
        member = None if room is None else room.members.get(session_key)
        if member is not None:
            member.left = True
            self._ticket_of.pop(member.ticket, None)

    def _forget_left_locked(self, room: Room) -> None:
        for key in [key for key, member in room.members.items() if member.left]:
            del room.members[key]

    def _new_name(self, taken: set[str]) -> str:
        """An anonymous name no one present has: "Swift Otter", then "Swift Otter 2" ... once all are used."""
        for _ in range(20):
            name = f"{secrets.choice(ADJECTIVES)} {secrets.choice(ANIMALS)}"
            if name not in taken:
                return name
        base = f"{secrets.choice(ADJECTIVES)} {secrets.choice(ANIMALS)}"
        number = 2
        while f"{base} {number}" in taken:
            number += 1
        return f"{base} {number}"

    @staticmethod
    def _matches(key: Any, expected: bytes) -> bool:
        if not isinstance(key, str) or not key or len(key) > KEY_CHARS:
            return False
        return hmac.compare_digest(digest(key), expected)


def thinned(curve: tuple[tuple[int, ...], tuple[float, ...]], points: int) -> tuple[list[int], list[float]]:
    """At most `points` of a curve's (steps, values), evenly spread, the first and last kept."""
    pairs = evenly(list(zip(*curve)), points) if len(curve[0]) > points else list(zip(*curve))
    return [step for step, _ in pairs], [value for _, value in pairs]


def finite(value: float | None) -> float | None:
    """A loss as JSON and CSV can hold it: None for NaN or infinity (a diverged run)."""
    return None if value is None or not math.isfinite(value) else value
