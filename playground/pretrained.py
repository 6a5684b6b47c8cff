"""OpenAI's pretrained GPT-2 as a model Generate and Attention can read: one copy of its weights for
the whole server, and for each session that reads it a GPT module of its own over those weights.

    shared = SharedGPT2(settings.gpt2_weights)   # nothing loaded yet
    gpt2 = shared.get()                          # loaded once (seconds), under a lock; gr.Error if it cannot be
    session.pretrained = reading(gpt2)           # the session's own module: its hooks are its own

Each tab puts the same picker at its top (`picker(ctx, tab_id)`): "Your model" or "GPT-2". Choosing
sets `session.pretrained` and `ctx.model_changed` to a description of what the tabs now read, so every
tab (and the other tab's picker) follows. GPT-2 is read-only: the Train tab trains only the session's
own small model, and resets the choice when it makes or loads one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import gradio as gr

from core.pretrained import CONFIG_FILE, WEIGHTS_FILE, Pretrained, PretrainedUnavailable, load_gpt2
from playground import validate
from playground.sessions import Session, TrainedModel, release_memory
from playground.settings import ENV_PREFIX

if TYPE_CHECKING:
    from playground.context import AppContext

YOURS, GPT2 = "yours", "gpt2"
CHOICES = [("Your model", YOURS), ("GPT-2 (pretrained)", GPT2)]
CORPUS_NAME = "WebText (OpenAI's GPT-2)"
# A failed load is not tried again before this: a click must not start a 500 MB download each time.
RETRY_AFTER_S = 60.0
LOCAL_ADVICE = (
    f"To use a local copy, start the app with {ENV_PREFIX}GPT2_WEIGHTS=/path/to/folder: a folder holding "
    f"{CONFIG_FILE} and {WEIGHTS_FILE}, e.g. made with "
    f"`huggingface-cli download gpt2 {CONFIG_FILE} {WEIGHTS_FILE} --local-dir /path/to/folder`."
)

log = logging.getLogger("playground")


class SharedGPT2:
    """The server's one copy of GPT-2's weights, loaded on first use (thread-safe); `get()` gives it or
    raises gr.Error saying why it cannot be had and how to point the app at a local folder."""

    def __init__(self, weights: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.weights = weights  # a Hub repo id or a local folder, from the server's settings
        self._clock = clock
        self._lock = threading.Lock()
        self._loaded: Pretrained | None = None
        self._failed: tuple[float, str] | None = None  # (when, the message) of the last failed load

    def get(self) -> Pretrained:
        with self._lock:  # one load at a time: the others wait for it, then share it
            if self._loaded is not None:
                return self._loaded
            if self._failed is not None and self._clock() - self._failed[0] < RETRY_AFTER_S:
                raise gr.Error(self._failed[1], print_exception=False)
            try:
                self._loaded = load_gpt2(self.weights)
            except (PretrainedUnavailable, ValueError) as error:
                # the details (paths, causes) for the operator's log; the message below for the user
                log.warning("GPT-2 from %r could not be loaded: %s", self.weights, error)
                why = ("it could not be downloaded from the Hugging Face Hub (is this server offline?)"
                       if isinstance(error, PretrainedUnavailable) else "its files are not a GPT-2 this app can run")
                message = f"GPT-2's weights are not available on this server: {why}. {LOCAL_ADVICE}"
                self._failed = (self._clock(), message)
                raise gr.Error(message, print_exception=False) from None
            self._failed = None
            release_memory()  # the file's tensors, transposed into new ones, are garbage: give their pages back
            return self._loaded


def reading(gpt2: Pretrained) -> TrainedModel:
    """What a session reads of GPT-2: a module of its own over the shared weights, nothing to train."""
    return TrainedModel(gpt2.view(), gpt2.tokenizer, CORPUS_NAME)


def describe(gpt2: TrainedModel) -> str:
    """One line about GPT-2 for the tabs (the value of ctx.model_changed)."""
    c = gpt2.model.config
    return (f"GPT-2 (pretrained by OpenAI on {CORPUS_NAME.split(' ')[0]}): {c.n_layer} layers x {c.n_head} heads, "
            f"{c.n_embd} channels, context {c.block_size}, vocabulary {c.vocab_size:,}; read-only: this server "
            "trains only small models, on the Train tab.")


def read_only_note(gpt2: TrainedModel) -> str:
    """Under the picker while GPT-2 is chosen: what it is, and why it cannot be trained here."""
    params = gpt2.model.parameter_counts()["total"]
    return (f"**GPT-2 is read-only here:** a small CPU server (a free Space has 2 cores) cannot train its "
            f"{params / 1e6:,.0f}M parameters. Generate with it and look inside its "
            f"{gpt2.model.config.n_layer * gpt2.model.config.n_head} heads; the **Train** tab trains your own small "
            "model, and **Your model** reads it again.")


class ModelPicker:
    """The handlers of the pickers: which model Generate and Attention read, per session."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def use_model(self, choice, request: gr.Request) -> tuple[str, str, str]:
        """(the picker's value, the note under it, ctx.model_changed's new value). When GPT-2 cannot be
        had, the picker goes back to "yours" with the reason in the note: it must show what is read."""
        choice = validate.choice(choice, "Model", [value for _, value in CHOICES])
        session = self.ctx.registry.get(request)
        if choice == YOURS:
            session.pretrained = None
            return YOURS, "", self.described(session)
        try:
            gpt2 = self.ctx.gpt2.get()
        except gr.Error as error:
            gr.Warning(error.message)
            return YOURS, f"⚠️ {error.message}", self.described(session)  # nothing loaded: none was read
        if session.pretrained is None:
            # It holds no weights of its own, but its analyses are the largest a session keeps (144 heads):
            # a slot, like any model, so a flood of sessions cannot fill the memory with them.
            self.ctx.registry.claim_model(session)
            session.pretrained = reading(gpt2)
        return GPT2, read_only_note(session.pretrained), self.described(session)

    def follow(self, request: gr.Request) -> tuple[str, str]:
        """The picker and its note as the session's choice is now (after any tab changed the model)."""
        session = self.ctx.registry.peek(request)
        if session is None or session.pretrained is None:
            return YOURS, ""
        return GPT2, read_only_note(session.pretrained)

    @staticmethod
    def described(session: Session) -> str:
        """What Generate and Attention read, in one line ('' when nothing)."""
        if session.pretrained is not None:
            return describe(session.pretrained)
        return "" if session.trained is None else session.trained.describe()


def picker(ctx: AppContext, tab_id: str) -> gr.Radio:
    """The "Model" picker at the top of a tab (`tab_id` "generate" or "attention"): the same handlers on
    both tabs, public as /use_model on Generate's."""
    handlers = ModelPicker(ctx)
    with gr.Row(equal_height=True):
        choice = gr.Radio(CHOICES, value=YOURS, label="Model", scale=1, min_width=260,
                          elem_id=f"{tab_id}-model-choice")
        with gr.Column(scale=2, min_width=280):  # on a phone the note wraps below the picker, full width
            note = gr.Markdown("", elem_id=f"{tab_id}-model-note")
    api = dict(api_name="use_model") if tab_id == "generate" else dict(api_name=f"{tab_id}_use_model",
                                                                        api_visibility="private")
    # Loading GPT-2 the first time takes seconds: it waits in line with the analyses, not the cheap events.
    choice.input(handlers.use_model, choice, [choice, note, ctx.model_changed], **api, **ctx.heavy("attention"))
    ctx.model_changed.change(handlers.follow, None, [choice, note], api_name=f"{tab_id}_model_follow",
                             api_visibility="private", **ctx.cheap())
    return choice
