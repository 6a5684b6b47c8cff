"""What every tab's `build(ctx)` receives: the settings, the session registry, and the few
components that tabs share.

    def build(ctx: AppContext) -> None:          # called inside `with gr.Tab(...)`
        button.click(handler, inputs, outputs, api_name="attention",
                     **ctx.heavy("attention"))    # concurrency_id/limit for a heavy event kind
        stop.click(cheap_handler, ..., **ctx.cheap())   # never waits behind training

        def handler(text, request: gr.Request):
            session = ctx.registry.get(request)
            with ctx.registry.job(request, "attention"):
                ...

Shared: `rooms`, the teachers' rooms (`playground.rooms`), `lesson`, the Train tab's form as what a teacher
pushes to a room (set by the Train tab for the Room tab), `routes`, plain HTTP routes a tab adds to the app
(a learner's page asking for the room's lesson), `share`, the round-robin turns trainings take step by step (`core.schedule`), `group`, where
the Train tab's trainings step together instead on a GPU host (`core.group`; `stacked()` says where),
`workers`, the processes where they step on a CPU host instead (`core.workers`; None: in turns),
`pretrained`, one copy of each pretrained model's weights (`playground.pretrained`), and `store`,
where each browser's model is kept across restarts (`playground.store`).

Shared components:
- `model_changed`: a hidden Textbox the Train tab sets to a new value whenever the session's model
  is replaced, trained further, reset or loaded from a checkpoint, and the model pickers of Generate
  and Attention when the session switches between its model and GPT-2. Its value is a short
  description of what Generate and Attention read (empty when there is nothing). Tabs that show
  something derived from the model follow it with `ctx.follow_model(fn, inputs, outputs)`, never
  with a `.change` listener of their own (see `follow_model`).
- `demo`: the `gr.Blocks` being built, e.g. for `ctx.demo.load(fn, inputs, outputs)`.
- `tabs`: the `gr.Tabs`, so a button can switch tab (`gr.Tabs(selected="attention")`); tab ids are
  "train", "generate", "attention", "ladder", "baby", "room".

Never imports a tab: tabs receive the context, the context knows no tab.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
from fastapi.routing import APIRoute

from core.config import TrainConfig
from core.data import TokenData
from core.device import resolve_device
from core.group import StepGroup, groupable
from core.model import GPT
from core.observers import standard
from core.schedule import FairShare
from core.tokenizers import Tokenizer
from core.train import Trainer
from core.workers import StepWorkers, shareable
from playground.pretrained import CATALOGUE, SharedPretrained, gguf_kinds
from playground.rooms import Lesson, Rooms
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.store import StateStore
from playground.zerogpu import Chunk, Update, ZeroGPU


@dataclass(frozen=True)
class LessonForm:
    """The Train tab's form as a lesson a teacher pushes to a room (the Train tab sets `AppContext.lesson`; the
    Room tab reads it): its fields by name, the groups of fields a lesson may hide or lock, and `check(values,
    hide, lock, before)`, which checks a form by the Train tab's rules (gr.Error) and says what it changes
    from the lesson `before` (None: the room's first), in words for the learners' banner."""

    fields: dict[str, gr.Component]
    groups: tuple[str, ...]
    check: Callable[[dict[str, Any], tuple[str, ...], tuple[str, ...], Lesson | None], str]


# Events that do real work share a concurrency id per kind; the limit comes from the settings.
HEAVY_KINDS = ("train", "generate", "attention", "baby", "checkpoint")


@dataclass
class AppContext:
    settings: Settings
    registry: SessionRegistry
    model_changed: gr.Textbox
    tabs: gr.Tabs
    demo: gr.Blocks | None = None  # for `ctx.demo.load(...)` (runs when a page opens)
    share: FairShare = field(default_factory=FairShare)  # turns for every session's training steps
    group: StepGroup = field(default_factory=StepGroup)  # where trainings step together (`stacked`)
    # Where the Train tab's CPU trainings step (made from the settings' `step_workers`; None: in `share`'s turns)
    workers: StepWorkers | None = field(default=None, init=False)
    store: StateStore | None = None  # where models outlive the process (playground.store); None: memory only
    # The pretrained models every session may read, by key: CATALOGUE's, then the operator's GGUF files
    # (gguf_kinds of the setting gguf_dir); made from the settings if None.
    pretrained: dict[str, SharedPretrained] | None = None
    # On a ZeroGPU Space: the GPU call that trains a chunk, and the turns the learners' chunks take
    # (`playground.zerogpu`); None elsewhere.
    gpu: Callable[[Chunk], Iterator[Update]] | None = None
    gpu_turns: FairShare = field(default_factory=lambda: FairShare(1))
    rooms: Rooms | None = None  # the teachers' rooms (playground.rooms; made from the settings if None)
    lesson: LessonForm | None = None  # the Train tab's form as a room's lesson (set by the Train tab)
    # Plain HTTP routes the tabs add to the app beside Gradio's (`launch_kwargs(..., routes=demo.routes)`)
    routes: list[APIRoute] = field(default_factory=list, init=False)
    # (fn, inputs, outputs) of what follows `model_changed`, in the order the tabs asked (`follow_model`)
    followers: list[tuple[Callable[..., Any], list[gr.Component], list[gr.Component]]] = field(
        default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.pretrained is None:
            self.pretrained = {key: SharedPretrained(kind, getattr(self.settings, kind.setting))
                               for key, kind in CATALOGUE.items()}
            self.pretrained.update({key: SharedPretrained(kind, kind.path)
                                    for key, kind in gguf_kinds(self.settings.gguf_dir).items()})
        if self.rooms is None:
            s = self.settings
            self.rooms = Rooms(self.registry, max_rooms=s.max_rooms, max_learners=s.room_max_learners,
                               idle_s=s.room_idle_s, server_key=s.teacher_key)
        if self.settings.worker_processes:  # they start when a second training joins (core.workers)
            self.workers = StepWorkers(self.settings.worker_processes)

    def heavy(self, kind: str) -> dict:
        """Event keyword arguments for a heavy event kind: at most N of them run at once."""
        if kind not in HEAVY_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; use one of {HEAVY_KINDS}")
        return dict(concurrency_id=kind, concurrency_limit=getattr(self.settings, f"{kind}_concurrency"))

    def training_device(self, n_params: int) -> str:
        """Where a model of `n_params` parameters trains in this process: core's own choice ("auto": the GPU
        where there is one), except that a model under the `gpu_min_params` setting stays on the CPU, and
        on ZeroGPU everything does (torch says CUDA is here, but it is only in the GPU calls)."""
        return "cpu" if n_params < self.settings.gpu_min_params or self.gpu is not None else "auto"

    def stacked(self) -> bool:
        """Whether the Train tab's trainings step together (`core.group`): the `stack_steps` setting, whose
        "auto" means on a GPU host; never on ZeroGPU (its GPU is there only inside its calls)."""
        mode = self.settings.stack_steps
        return self.gpu is None and (mode == "on" or (mode == "auto" and resolve_device().type == "cuda"))

    @property
    def trainings(self) -> int:
        """How many trainings run now: those taking turns, those stepping together and those in the workers."""
        return self.share.members + self.group.members + (self.workers.members if self.workers else 0)

    def trainer(self, model: GPT, data: TokenData, config: TrainConfig, n_params: int,
                tokenizer: Tokenizer | None = None) -> Trainer:
        """The trainer for a session's model. Where trainings step together (`stacked`), on the device core
        picks (the GPU) at every size, in the group's ticks; a model the group cannot stack (dropout) and
        every model elsewhere trains on the device `training_device` picks: on the CPU in the step
        `workers` where there are some and they can step it, else taking turns with the others step by
        step; on ZeroGPU, a model of `gpu_min_params` or more trains in GPU calls, taking turns
        chunk by chunk (a `ZeroGPU` route among its observers: `playground.zerogpu.run` runs it)."""
        if self.stacked():
            config = dataclasses.replace(config, device="auto")
            trainer = Trainer(model, data, config, update=self.group.update,
                              observers=[self.group.member(), *standard(config, tokenizer=tokenizer)])
            if groupable(trainer):
                return trainer
        route = []
        if self.gpu is not None and n_params >= self.settings.gpu_min_params:
            route = [ZeroGPU(data, config, gpu=self.gpu, turns=self.gpu_turns, chunk_s=self.settings.zero_gpu_chunk_s)]
        config = dataclasses.replace(config, device=self.training_device(n_params))
        if self.workers is not None and not route:
            trainer = Trainer(model, data, config, update=self.workers.update,
                              observers=[self.workers.member(), *standard(config, tokenizer=tokenizer)])
            if shareable(trainer):
                return trainer
        observers = [*route, *standard(config, tokenizer=tokenizer, share=self.share)]
        return Trainer(model, data, config, observers=observers)

    @staticmethod
    def cheap() -> dict:
        """Event keyword arguments for cheap events (stop, previews, counts): no limit, own id,
        so they never wait in line behind a training."""
        return dict(concurrency_id="cheap", concurrency_limit=None)

    def follow_model(self, fn: Callable[..., Any], inputs: list[gr.Component], outputs: list[gr.Component]) -> None:
        """Have `fn(*values of inputs, request)` set `outputs` (a tuple for several, gr.skip() for none)
        each time `model_changed` changes. `wire_followers` runs them all as one event."""
        self.followers.append((fn, list(inputs), list(outputs)))

    def wire_followers(self) -> None:
        """The one `model_changed.change` event, running every follower in turn (once every tab is built).

        One event, not one per follower: a change that comes while its listener still runs is deferred by
        Gradio's page, which then sends the change again to every listener of it. With several listeners,
        each one ending while another ran re-sent it to the others, and they kept each other going a few
        times a second for as long as the page stayed open (issue 30). One listener runs once per change
        (once more if a change came while it ran), and a change costs the server one call, not six."""
        followers = list(self.followers)

        def follow_model(request: gr.Request, *values: Any) -> list:
            shown, start = [], 0
            for fn, inputs, outputs in followers:
                result = fn(*values[start:start + len(inputs)], request)
                start += len(inputs)
                shown.extend(result if len(outputs) > 1 else [result])
            return shown

        self.model_changed.change(
            follow_model, [c for _, inputs, _ in followers for c in inputs],
            [c for _, _, outputs in followers for c in outputs], api_name="model_follow", api_visibility="private",
            show_progress="hidden", **self.cheap())  # no spinner over a picker: it is not being chosen
