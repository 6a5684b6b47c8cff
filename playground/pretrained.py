"""Pretrained models that Generate and Attention can read, declared once in `CATALOGUE` (OpenAI's GPT-2,
Hugging Face's SmolLM2-135M), and the GGUF files the server's operator offers (`gguf_kinds`, from the
setting gguf_dir): for each, one copy of its weights for the whole server, and for each session that
reads it a GPT module of its own over those weights.

    shared = SharedPretrained(CATALOGUE["gpt2"], settings.gpt2_weights)   # nothing loaded yet
    model = shared.get()             # loaded once (seconds), under a lock; gr.Error if it cannot be
    session.pretrained = reading(CATALOGUE["gpt2"], model)   # the session's own module: its hooks are its own

They are read-only: the Train tab trains only the session's own small model, and resets the choice
when it makes or loads one. The picker that chooses one is `playground.model_picker`.

Imports core, the sessions and the settings. Never imports a tab, the model picker or
`playground.context` (the context holds the shared copies made here).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from core.gguf import ARCHITECTURES, DEFAULT_MAX_BYTES, TYPES, gguf_models, load_gguf
from core.pretrained import (
    CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, Pretrained, PretrainedUnavailable, load_gpt2, load_llama,
)
from playground.sessions import TrainedModel, release_memory
from playground.settings import ENV_PREFIX

# A failed load is not tried again before this: a click must not start a 500 MB download each time.
RETRY_AFTER_S = 60.0


@dataclass(frozen=True)
class Kind:
    """A pretrained model the app offers: how to load it, and how to name it."""

    key: str  # the picker's value; the server's setting is `{key}_weights` (PLAYGROUND_{KEY}_WEIGHTS)
    title: str  # "GPT-2"
    maker: str  # who trained it
    corpus: str  # on what, for display
    load: Callable[[str], Pretrained]
    repo: str  # its Hugging Face Hub repo id (the setting's default)
    files: tuple[str, ...]  # what a local folder must hold

    @property
    def label(self) -> str:
        return f"{self.title} (pretrained)"

    @property
    def origin(self) -> str:
        """Where it comes from, for display."""
        return f"pretrained by {self.maker} on {self.corpus}"

    @property
    def unreadable(self) -> str:
        """Why it cannot be had when its files are there but wrong (the details go to the log)."""
        return f"its files are not a {self.title} this app can run"

    @property
    def setting(self) -> str:
        return f"{self.key}_weights"

    def local_advice(self) -> str:
        """How an operator gives the server a local copy (the only way offline)."""
        folder, files = "/path/to/folder", " ".join(self.files)
        return (f"To use a local copy, start the app with `{ENV_PREFIX}{self.setting.upper()}={folder}`: a folder "
                f"holding {', '.join(self.files)}, e.g. made with "
                f"`huggingface-cli download {self.repo} {files} --local-dir {folder}`.")


@dataclass(frozen=True)
class GGUFKind(Kind):
    """A GGUF file the operator offers (the setting gguf_dir), under the name the picker shows: its path stays
    on the server."""

    path: str = ""

    @property
    def label(self) -> str:
        return f"{self.title} (GGUF file)"

    @property
    def origin(self) -> str:
        return "a GGUF file on this server"

    @property
    def unreadable(self) -> str:
        return "its file is not a GGUF model this app can read"

    def local_advice(self) -> str:
        return (f"The server reads it from `{ENV_PREFIX}GGUF_DIR`: a GGUF file of a {' or '.join(ARCHITECTURES)} model "
                f"whose tensors are {', '.join(t.name for t in TYPES)}, of at most {DEFAULT_MAX_BYTES / 1e9:.1f} GB as "
                "float32 (the server's log says what this one is not).")


GGUF_PREFIX = "gguf:"  # a GGUF kind's key is this and the model's name


def gguf_kinds(folder: str) -> dict[str, GGUFKind]:
    """The GGUF models of the operator's folder (or file), keyed "gguf:NAME"; none when `folder` is ""."""
    if not folder:
        return {}
    return {GGUF_PREFIX + name: GGUFKind(GGUF_PREFIX + name, name, "", "", load_gguf, "", (), str(path))
            for name, path in gguf_models(folder).items()}


CATALOGUE: dict[str, Kind] = {kind.key: kind for kind in (
    Kind("gpt2", "GPT-2", "OpenAI", "WebText", load_gpt2, "gpt2", (CONFIG_FILE, WEIGHTS_FILE)),
    Kind("smollm2", "SmolLM2-135M", "Hugging Face", "SmolLM-Corpus", load_llama, "HuggingFaceTB/SmolLM2-135M",
         (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE)),
)}

log = logging.getLogger("playground")


class SharedPretrained:
    """The server's one copy of a pretrained model's weights, loaded on first use (thread-safe); `get()`
    gives it or raises gr.Error saying why it cannot be had (the details go to the log; how to provide the
    weights is `Kind.local_advice`)."""

    def __init__(self, kind: Kind, weights: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
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
                self._loaded = self.kind.load(self.weights)
            except (PretrainedUnavailable, ValueError) as error:
                # the details (paths, causes) for the operator's log; the message below for the user
                log.warning("%s from %r could not be loaded: %s", self.kind.title, self.weights, error)
                why = ("it could not be downloaded from the Hugging Face Hub (is this server offline?)"
                       if isinstance(error, PretrainedUnavailable) else self.kind.unreadable)
                message = f"{self.kind.title}'s weights are not available on this server: {why}."
                self._failed = (self._clock(), message)
                raise gr.Error(message, print_exception=False) from None
            self._failed = None
            release_memory()  # the file's tensors, converted into new ones, are garbage: give their pages back
            return self._loaded


def reading(kind: Kind, pretrained: Pretrained) -> TrainedModel:
    """What a session reads of a pretrained model: a module of its own over the shared weights, nothing to train."""
    return TrainedModel(pretrained.view(), pretrained.tokenizer, f"{kind.title} ({kind.origin})", source=kind.key)


def describe(kind: Kind, read: TrainedModel) -> str:
    """One line about a pretrained model for the tabs (the value of ctx.model_changed)."""
    c = read.model.config
    heads = f"{c.n_head} heads" if c.kv_heads == c.n_head else f"{c.n_head} heads sharing {c.kv_heads} key/value heads"
    return (f"{kind.title} ({kind.origin}): {c.n_layer} layers x {heads}, "
            f"{c.n_embd} channels, context {c.block_size}, vocabulary {c.vocab_size:,}; read-only: this server "
            "trains only small models, on the Train tab.")


def read_only_note(kind: Kind, read: TrainedModel) -> str:
    """Under the picker while a pretrained model is chosen: what it is, and why it cannot be trained here."""
    params, c = read.model.parameter_counts()["total"], read.model.config
    count = f"{params / 1e6:,.0f}M" if params >= 1e6 else f"{params:,}"
    return (f"**{kind.title} is read-only here:** a small CPU server (a free Space has 2 cores) cannot train its "
            f"{count} parameters. Generate with it and look inside its {c.n_layer * c.n_head} heads; "
            "the **Train** tab trains your own small model, and **Your model** reads it again.")
