"""Fair turns: many trainings share a few cores step by step, round-robin.

    share = FairShare(slots=2)              # as many steps at once as the cores allow
    trainer = Trainer(model, data, config, observers=[Turns(share)])   # core.observers.Turns
    for event in trainer.run(): ...         # each step waits for its turn

Every training thread asks for a turn before each step. Turns are granted first come, first
served, and a thread that just had one queues behind everyone already waiting, so N trainings
advance together at about 1/N of the pace each, instead of the first two finishing while the
others have not started. A workshop server with sixty learners shows each of them a falling
curve within seconds rather than a queue.

`withdraw(owner)` lets a waiting owner go without a turn (Stop should not wait for one), and
`members` counts the trainings taking part, for a status such as "12 trainings share the server".

Imports nothing of the project. Never imports torch, gradio, plotly or `playground`: turns are plain threading.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Hashable, Iterator


def default_slots() -> int:
    """Steps that may run at once: one per CPU core this process may use.

    A tiny model's step is bound by Python's dispatch of many small ops, so even on a GPU the CPU
    cores are the limit; a GPU host has more of them and its steps are shorter, so more trainings
    keep pace without changing anything here.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores)


class _Waiter:
    __slots__ = ("owner", "granted", "ready")

    def __init__(self, owner: Hashable) -> None:
        self.owner = owner
        self.granted = False
        self.ready = threading.Event()


class FairShare:
    """A first-come, first-served semaphore with `slots` permits, plus the count of its members."""

    def __init__(self, slots: int | None = None) -> None:
        slots = default_slots() if slots is None else slots
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, got {slots!r}")
        self.slots = slots
        self._free = slots
        self._queue: deque[_Waiter] = deque()
        self._members: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    @property
    def members(self) -> int:
        """How many owners take part now (between `join` and `leave`)."""
        with self._lock:
            return len(self._members)

    @contextlib.contextmanager
    def membership(self, owner: Hashable) -> Iterator[None]:
        """Count `owner` among the members while the block runs (a training's whole run)."""
        with self._lock:
            self._members[owner] = self._members.get(owner, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._members[owner] -= 1
                if not self._members[owner]:
                    del self._members[owner]

    @contextlib.contextmanager
    def turn(self, owner: Hashable, first: bool = False) -> Iterator[bool]:
        """Wait for a turn; yields True while it is held, or False at once if `owner` was withdrawn
        while waiting (then nothing is held). A `first` turn (a training's first step) goes ahead of
        the queue, so a newcomer sees its first result at once, however many wait."""
        waiter = _Waiter(owner)
        with self._lock:
            if self._free and not self._queue:
                self._free -= 1
                waiter.granted = True
            elif first:
                self._queue.appendleft(waiter)
            else:
                self._queue.append(waiter)
        if not waiter.granted:
            waiter.ready.wait()
        if not waiter.granted:
            yield False
            return
        try:
            yield True
        finally:
            self._release()

    def withdraw(self, owner: Hashable) -> None:
        """Let `owner`'s waiting turn go unanswered: its `turn()` yields False now (thread-safe)."""
        with self._lock:
            waiting = [w for w in self._queue if w.owner == owner]
            for waiter in waiting:
                self._queue.remove(waiter)
        for waiter in waiting:
            waiter.ready.set()

    def _release(self) -> None:
        with self._lock:
            if self._queue:  # the permit passes straight to the longest waiter
                waiter = self._queue.popleft()
                waiter.granted = True
                waiter.ready.set()
            else:
                self._free += 1

