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

Shared: `share`, the round-robin turns every training takes step by step (`core.schedule`),
`pretrained`, one copy of each pretrained model's weights (`playground.pretrained`), and `store`,
where each browser's model is kept across restarts (`playground.store`).

Shared components:
- `model_changed`: a hidden Textbox the Train tab sets to a new value whenever the session's model
  is replaced, trained further, reset or loaded from a checkpoint, and the model pickers of Generate
  and Attention when the session switches between its model and GPT-2. Tabs that show something
  derived from the model listen with `ctx.model_changed.change(...)`. Its value is a short
  description of what Generate and Attention read (empty when there is nothing).
- `demo`: the `gr.Blocks` being built, e.g. for `ctx.demo.load(fn, inputs, outputs)`.
- `tabs`: the `gr.Tabs`, so a button can switch tab (`gr.Tabs(selected="attention")`); tab ids are
  "train", "generate", "attention", "ladder", "baby".

Never imports a tab: tabs receive the context, the context knows no tab.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr

from core.schedule import FairShare
from playground.pretrained import CATALOGUE, SharedPretrained
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.store import StateStore

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
    store: StateStore | None = None  # where models outlive the process (playground.store); None: memory only
    # The pretrained models every session may read, by CATALOGUE key (made from the settings if None).
    pretrained: dict[str, SharedPretrained] | None = None

    def __post_init__(self) -> None:
        if self.pretrained is None:
            self.pretrained = {key: SharedPretrained(kind, getattr(self.settings, kind.setting))
                               for key, kind in CATALOGUE.items()}

    def heavy(self, kind: str) -> dict:
        """Event keyword arguments for a heavy event kind: at most N of them run at once."""
        if kind not in HEAVY_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; use one of {HEAVY_KINDS}")
        return dict(concurrency_id=kind, concurrency_limit=getattr(self.settings, f"{kind}_concurrency"))

    @staticmethod
    def cheap() -> dict:
        """Event keyword arguments for cheap events (stop, previews, counts): no limit, own id,
        so they never wait in line behind a training."""
        return dict(concurrency_id="cheap", concurrency_limit=None)
