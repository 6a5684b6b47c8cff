"""OpenAI's pretrained GPT-2 as a model Generate and Attention can read: one copy of its weights for
the whole server, and for each session that reads it a GPT module of its own over those weights.

    shared = SharedGPT2(settings.gpt2_weights)   # nothing loaded yet
    gpt2 = shared.get()                          # loaded once (seconds), under a lock; gr.Error if it cannot be
    session.pretrained = reading(gpt2)           # the session's own module: its hooks are its own

GPT-2 is read-only: the Train tab trains only the session's own small model, and resets the choice
when it makes or loads one. The picker that chooses it is `playground.model_picker`.

Imports core, the sessions and the settings. Never imports a tab, the model picker or
`playground.context` (the context holds the shared copy made here).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import gradio as gr

from core.pretrained import CONFIG_FILE, WEIGHTS_FILE, Pretrained, PretrainedUnavailable, load_gpt2
from playground.sessions import TrainedModel, release_memory
from playground.settings import ENV_PREFIX

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
