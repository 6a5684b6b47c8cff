"""Checkpoints on the Train tab: the session's model as a .zip to download (with the training state
while it fits the upload cap, so Train continues exactly), an uploaded .zip as the session's model, and
the model exported for Hugging Face `transformers` as a .zip (`core.export`, as `python -m core export`).

The caps are checked on an upload's config before a byte of its weights is read (`core.checkpoint`).
`CheckpointHandlers` is given the form's rules (the caps) and the session's download folder by
`TrainHandlers` (`layout`); `restore` adopts a kept model through it, as an upload is adopted.
Never imports the layout or the link.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from core.checkpoint import load as load_checkpoint_file
from core.checkpoint import load_trainer_state, save_archive
from core.config import GPTConfig, stage_of
from core.data import CORPORA, Task
from core.export import refusal, target, to_transformers
from core.presets import PRESETS, preset_configs
from playground import validate
from playground.context import AppContext
from playground.figures import note_figure
from playground.figures.training import loss_figure
from playground.sessions import Session, TrainedModel, model_title, training_bytes
from playground.tabs.train.form import MODEL_FIELDS, FormRules, modern_parts, switches, upload_path
from playground.tabs.train.replay import NO_MOVIE, NO_REPLAY, NO_SCORES
from playground.tabs.train.run import describe, progress_html


def checkpoint_meta(trained: TrainedModel) -> dict:
    """What a checkpoint of the session's model says besides the weights: its corpus, steps and curve."""
    return {
        "corpus": trained.corpus_name, "steps": trained.step, "history": trained.history,
        "train_config": trained.train_config.to_dict() if trained.train_config else None,
    }


NO_MODEL_TO_EXPORT = "Train a model first: this note then says whether `transformers` can load it."


def exported_as_they_are() -> list[str]:
    """The presets whose models export as they are, by core.export's own rule (the vocabulary's size
    takes no part in it)."""
    return [name for name in PRESETS if refusal(preset_configs(name, vocab_size=2)[0]) is None]


def export_refusal(config: GPTConfig) -> str | None:
    """Why the model cannot be exported, in the UI's words (None when it can): the options transformers
    cannot express and, for the output layer's bias that most models made with the form have, which
    presets' models export."""
    why = refusal(config)
    if why is None or not config.lm_head_bias:
        return why
    titles = "; ".join(PRESETS[name].title for name in exported_as_they_are())
    return (f"{why}. Its output layer has a bias, as the lecture's model has and GPT-2 and Llama do not; the form "
            f"keeps each preset's choice, and these presets' models have none: {titles}. On the command line, "
            "`--set lm_head_bias=false` trains the others without it (the README lists which then export).")


class CheckpointHandlers:
    """Prepare download (.zip) and the upload of a checkpoint."""

    def __init__(self, ctx: AppContext, rules: FormRules, folder: Callable[[Session], Path]) -> None:
        self.settings, self.registry, self.rules, self._folder = ctx.settings, ctx.registry, rules, folder

    def save_checkpoint(self, request: gr.Request) -> str:
        """The session's model as a .zip checkpoint to download."""
        with self._download(request, "saving a checkpoint", "save") as (trained, folder):
            with validate.user_errors():
                return str(save_archive(folder / f"gpt-step{trained.step}.zip", trained.model, trained.tokenizer,
                                        checkpoint_meta(trained), trainer_state=self._downloadable_state(trained)))

    def export_transformers(self, request: gr.Request) -> str:
        """The session's model as a `transformers` model folder, zipped, to download; a model with options
        transformers cannot express is refused, naming them."""
        with self._download(request, "exporting the model", "export") as (trained, folder):
            why = export_refusal(trained.model.config)
            if why is not None:  # said beside the button already; asked through the API all the same
                raise gr.Error(why, print_exception=False)
            exported = folder / f"gpt-step{trained.step}-transformers"
            with validate.user_errors():
                # The card's loading code reads the folder as the zip unpacks it: under its own name.
                to_transformers(trained.model, trained.tokenizer, checkpoint_meta(trained), exported,
                                load_from=exported.name)
            archive = shutil.make_archive(str(exported), "zip", root_dir=folder, base_dir=exported.name)
            shutil.rmtree(exported)  # the zip holds it
            return archive

    def export_note(self, request: gr.Request) -> tuple[str, Any]:
        """(the note beside Export, the button's update), following the session's model: what transformers
        will load it as, or why it cannot (the button disabled then)."""
        session = self.registry.peek(request)
        if session is None or session.trained is None:
            return NO_MODEL_TO_EXPORT, gr.update(interactive=False)
        config = session.trained.model.config
        why = export_refusal(config)
        if why is not None:
            return f"⚠️ This model cannot be exported: {why}", gr.update(interactive=False)
        return f"This model exports as transformers' `{target(config).architecture}`.", gr.update(interactive=True)

    @contextlib.contextmanager
    def _download(self, request: gr.Request, job: str, verb: str) -> Iterator[tuple[TrainedModel, Path]]:
        """Under the session's `job`: its model and its download folder, emptied (only the latest
        download of a session is kept)."""
        with self.registry.job(request, job) as session:
            if session.trained is None:
                raise gr.Error(f"There is no model to {verb} yet: train one first.")
            folder = self._folder(session)
            shutil.rmtree(folder, ignore_errors=True)
            yield session.trained, folder

    def _downloadable_state(self, trained: TrainedModel) -> dict | None:
        """The training state, if the download can still be uploaded here with it: weights plus
        AdamW's two moments are about 12 bytes a parameter."""
        if 12 * trained.model.parameter_counts()["total"] > 0.9 * self.settings.max_upload_bytes:
            return None
        return trained.training_state()

    def load_checkpoint(self, upload, request: gr.Request) -> dict[str, Any]:
        """Replace the session's model with an uploaded checkpoint; the status, chart and form fields
        that change, by name."""
        if not upload:
            raise gr.Error("Choose a checkpoint .zip to upload.")
        path = upload_path(upload)
        with self.registry.job(request, "loading a checkpoint") as session:
            meta = self.adopt(session, path, "an uploaded checkpoint")
        config = session.model.config
        status = (f"Loaded {model_title(config)} ({session.model.parameter_counts()['total']:,} parameters, "
                  f"step {session.trained.step}). Generate with it, inspect it, or pick its corpus and press Train to continue.")
        return {"status": status, **self.shown_after_load(session, meta)}

    def adopt(self, session: Session, path: str, source: str) -> dict:
        """Make the checkpoint at `path` the session's model (under its job lock); its meta. `source`
        names it where the checkpoint names no corpus."""
        with validate.user_errors():
            # The caps are checked on the checkpoint's config before a byte of weights is read,
            # and every member is read with a bound that config implies.
            model, tokenizer, meta = load_checkpoint_file(path, check_config=self.rules.check_caps)
            resume_state = load_trainer_state(path, config=model.config, max_history=self.settings.max_iters)
        self.registry.claim_model(session, training_bytes(model.parameter_counts()["total"]))
        session.trained = TrainedModel(model.train(), tokenizer, meta.get("corpus") or source,
                                       meta.get("history", []), resume_state=resume_state, task=_task(meta))
        session.pretrained = None  # Generate and Attention follow the model just loaded, not GPT-2
        session.last_text, session.last_steps = "", []
        return meta

    @staticmethod
    def shown_after_load(session: Session, meta: dict) -> dict[str, Any]:
        """The chart, the other tabs' signal and the model's form fields once a checkpoint is the model."""
        config = session.model.config
        return {
            "loss_plot": loss_figure(meta.get("history", [])), "model_changed": describe(session),
            "progress": progress_html(None, meta.get("history", []), config),
            # the movie and scores were the old model's: the upload has none until Train records one
            "movie_note": NO_MOVIE, "movie_plot": note_figure(NO_REPLAY), "head_scores": note_figure(NO_SCORES),
            "tokenizer": session.tokenizer.spec()["kind"], "stage": stage_of(config) or "gpt",
            **{name: getattr(config, name) for name in MODEL_FIELDS},
            **switches(config, stage_of(config)),  # a bigram's switches stay on: its stage has none
            **modern_parts(config),
        }


def _task(meta: dict) -> Task | None:
    """The synthetic task a checkpoint's model trained on, as its meta says: the app saves the corpus's
    title, the command line its preset (and a text file's name when it trained on that instead)."""
    for info in CORPORA.values():
        if info.title == meta.get("corpus"):
            return info.task
    preset = PRESETS.get(meta.get("preset"))
    return CORPORA[preset.corpus].task if preset is not None and not meta.get("text_file") else None
