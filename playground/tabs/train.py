"""Train tab: pick a corpus, tokenizer and model, train live, stop, continue, save and load.

The handlers live in `TrainHandlers` so tests can call them as plain functions with a session
id string instead of a gr.Request. `build(ctx)` lays out the tab and wires the events:
/train (streams), /stop, /reset, /preset, /save_checkpoint, /load_checkpoint (and the UI-only
live parameter count).
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import torch

from core.checkpoint import load as load_checkpoint_file
from core.checkpoint import load_trainer_state
from core.checkpoint import save_archive
from core.config import STAGE_DESCRIPTIONS, STAGES, GPTConfig, stage_of
from core.data import CORPORA, TokenData, corpus_text, default_tokenizer, load_shakespeare, read_text_file
from core.data import DataError, check_user_text
from core.model import GPT
from core.presets import PRESETS, get_preset, preset_configs
from core.tokenizers import Tokenizer, token_labels, tokenizer_from_spec
from core.train import Trainer
from playground import validate
from playground.context import AppContext
from playground.figures.attention import live_heatmap
from playground.figures.training import loss_figure
from playground.sessions import Session
from playground.settings import Settings

DEFAULT_PRESET = "repeat"  # offline, about ten seconds on one core, and a clear falling curve
PASTE, UPLOAD = "paste", "upload"
CORPUS_CHOICES = [(info.title, name) for name, info in CORPORA.items()] + [
    ("Paste your own text", PASTE), ("Upload a .txt file", UPLOAD),
]
TOKENIZER_CHOICES = [("Characters", "char"), ("GPT-2 BPE (50,257 tokens)", "gpt2")]
STAGE_CHOICES = [(f"{i + 1}. {STAGE_DESCRIPTIONS[name]}", name) for i, name in enumerate(STAGES)]
UI_INTERVAL_S = 0.25  # live view refresh: 4 a second, so a long run never floods the browser
ATTENTION_INTERVAL_S = 0.5  # the heatmap grid is the heaviest payload (~150 KB for 6 x 8 heads): 2 a second
SAMPLE_INTERVAL_S = 2.0  # a fresh live sample costs sample_tokens forward passes
SAMPLE_TOKENS = 120
# The model fields the tab controls; a trained model continues only if these still match.
MODEL_FIELDS = ("n_layer", "n_head", "n_embd", "block_size", "dropout")


@dataclass(frozen=True)
class Recipe:
    """The tab's inputs after validation: what to train, on what, and how."""

    preset: str
    corpus: str
    text: str | None  # pasted or uploaded text; None for a built-in corpus
    tokenizer: str
    stage: str
    model: dict  # MODEL_FIELDS
    train: dict  # TrainConfig overrides

    def configs(self, vocab_size: int):
        """(GPTConfig, TrainConfig) from the preset, overridden by this recipe."""
        with validate.user_errors():
            # A stage's switches win over the sliders (the one-head stage forces n_head=1).
            return preset_configs(self.preset, vocab_size, **{**self.model, **STAGES[self.stage], **self.train})

    @property
    def corpus_title(self) -> str:
        return CORPORA[self.corpus].title if self.corpus in CORPORA else ("your text" if self.corpus == PASTE else "your file")


# ------------------------------------------------------------------ corpus and tokens (cached, shared)


@functools.lru_cache(maxsize=8)
def _builtin_text(name: str) -> str:
    return corpus_text(name)  # Tiny Shakespeare downloads here on first use


@functools.lru_cache(maxsize=6)
def _builtin_tokens(name: str, tokenizer_spec: str, block_size: int) -> TokenData:
    """Built-in corpora are encoded once per tokenizer and shared (read-only) by all sessions."""
    return TokenData.from_text(_builtin_text(name), tokenizer_from_spec(json.loads(tokenizer_spec)), block_size)


def _corpus_vocab_text(corpus: str) -> str | None:
    """A built-in corpus's text for previews, without downloading anything (None if not here yet)."""
    if corpus == "shakespeare":
        try:
            return load_shakespeare(download=False)
        except DataError:
            return None
    return _builtin_text(corpus)


# ------------------------------------------------------------------ handlers


class TrainHandlers:
    """The Train tab's event handlers; `request` is a gr.Request or, in tests, a session id."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.settings: Settings = ctx.settings
        self.registry = ctx.registry
        self.scratch = Path(tempfile.mkdtemp(prefix="attention-playground-"))  # checkpoints to download
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)

    # ---- validation

    def recipe(self, preset, corpus, tokenizer, stage, n_layer, n_head, n_embd, block_size, dropout, steps,
               batch_size, learning_rate, seed, warmup, eval_interval, weight_decay, grad_clip, text="",
               upload=None) -> Recipe:
        """Check every input (the browser is no guarantee) and read pasted or uploaded text."""
        s = self.settings
        preset = validate.choice(preset, "Preset", PRESETS)
        corpus = validate.choice(corpus, "Corpus", [name for _, name in CORPUS_CHOICES])
        tokenizer = validate.choice(tokenizer, "Tokenizer", [name for _, name in TOKENIZER_CHOICES])
        stage = validate.choice(stage, "Stage", STAGES)
        model = dict(
            n_layer=validate.integer(n_layer, "Layers", 1, s.max_layers, cap=s.cap_hint("max_layers")),
            n_head=validate.integer(n_head, "Heads", 1, s.max_heads, cap=s.cap_hint("max_heads")),
            n_embd=validate.integer(n_embd, "Embedding size", 1, s.max_embd, cap=s.cap_hint("max_embd")),
            block_size=validate.integer(block_size, "Block size", 1, s.max_block_size, cap=s.cap_hint("max_block_size")),
            dropout=validate.number(dropout, "Dropout", 0.0, 0.9),
        )
        steps = validate.integer(steps, "Steps", 1, s.max_iters, cap=s.cap_hint("max_iters"))
        train = dict(
            max_iters=steps,
            lr_decay_iters=steps,
            batch_size=validate.integer(batch_size, "Batch size", 1, s.max_batch_size, cap=s.cap_hint("max_batch_size")),
            learning_rate=validate.number(learning_rate, "Learning rate", 1e-6, 1.0),
            seed=validate.integer(seed, "Seed", 0, 2**31 - 1),
            warmup_iters=validate.integer(warmup, "Warmup steps", 0, s.max_iters),
            eval_interval=validate.integer(eval_interval, "Evaluate every", 1, s.max_iters),
            weight_decay=validate.number(weight_decay, "Weight decay", 0.0, 1.0),
            grad_clip=validate.number(grad_clip, "Gradient clip", 0.0, 100.0),
            sample_tokens=SAMPLE_TOKENS,  # the live sample's length (the UI decides when to draw one)
        )
        # The schedule decays to the preset's floor, never above the chosen rate.
        train["min_lr"] = min(train["learning_rate"], get_preset(preset).train.get("min_lr", train["learning_rate"] / 10))
        user_text = None
        with validate.user_errors():
            if corpus == PASTE:
                text = validate.text(text, "Your text", s.max_text_chars, cap=s.cap_hint("max_text_chars"))
                # The character cap above is the limit; UTF-8 takes at most 4 bytes per character.
                user_text = check_user_text(text, min_chars=model["block_size"], max_bytes=4 * s.max_text_chars)
            elif corpus == UPLOAD:
                if not upload:
                    raise gr.Error("Upload a .txt file first (or pick another corpus).")
                user_text = read_text_file(_upload_path(upload), min_chars=model["block_size"], max_bytes=s.max_text_chars)
        return Recipe(preset, corpus, user_text, tokenizer, stage, model, train)

    def _check_size(self, config: GPTConfig) -> GPT:
        """A model of `config` on the meta device (no memory) after checking the parameter cap."""
        with torch.device("meta"):
            shell = GPT(config)
        total = shell.parameter_counts()["total"]
        if total > self.settings.max_params:
            raise gr.Error(
                f"This model has {total:,} parameters; the limit is {self.settings.max_params:,}. "
                f"Make it smaller (fewer layers or channels; GPT-2 BPE adds 50,257 x n_embd per embedding). "
                + self.settings.cap_hint("max_params")
            )
        return shell

    # ---- events

    def preview(self, *form, request: gr.Request = None) -> str:
        """Parameter count of the model these settings describe, and whether Train continues or starts."""
        try:
            recipe = self.recipe(*form)
            text = recipe.text if recipe.text is not None else _corpus_vocab_text(recipe.corpus)
            if text is None and recipe.tokenizer == "char":
                return "The parameter count appears once Tiny Shakespeare is downloaded (press **Train**)."
            tokenizer = default_tokenizer(recipe.tokenizer, text or "")
            config, _ = recipe.configs(tokenizer.vocab_size)
            counts = self._check_size(config).parameter_counts()
        except (gr.Error, ValueError) as error:
            return f"⚠️ {error}"
        parts = ", ".join(
            f"{name.replace('_', ' ')} {counts[name]:,}"
            for name in ("token_embedding", "position_embedding", "attention", "feed_forward", "lm_head")
            if counts[name]
        )
        lines = [f"**{counts['total']:,} parameters** ({parts}); vocabulary {config.vocab_size:,} tokens."]
        session = self.registry.peek(request) if request is not None else None
        if session is not None and session.model is not None:
            lines.append(self._continue_note(session, config, tokenizer))
        return "  \n".join(lines)

    def _continue_note(self, session: Session, config: GPTConfig, tokenizer: Tokenizer) -> str:
        problem = _mismatch(session, config, tokenizer)
        if problem:
            return f"These settings differ from your trained model ({problem}): press **Reset** before **Train**."
        return f"**Train** continues your model from step {_step(session)}."

    def train(self, preset, corpus, tokenizer, stage, n_layer, n_head, n_embd, block_size, dropout, steps,
              batch_size, learning_rate, seed, warmup, eval_interval, weight_decay, grad_clip, text="",
              upload=None, request: gr.Request = None):
        """Stream training: (status, progress html, loss figure, sample, attention figure, model_changed)."""
        recipe = self.recipe(preset, corpus, tokenizer, stage, n_layer, n_head, n_embd, block_size, dropout, steps,
                             batch_size, learning_rate, seed, warmup, eval_interval, weight_decay, grad_clip, text,
                             upload)
        with self.registry.job(request, "training") as session:
            session.stop_requested = False
            if recipe.corpus == "shakespeare":
                yield self._update(session, status="Loading Tiny Shakespeare (downloaded once, 1.1 MB)...")
            trainer, until, note = self._prepare(session, recipe)
            yield self._update(session, status=note, model_changed=_describe(session))
            yield from self._run(session, trainer, until)

    def _prepare(self, session: Session, recipe: Recipe) -> tuple[Trainer, int, str]:
        """The trainer to run: the session's model continued, or a new one. Never drops a model."""
        with validate.user_errors():
            text = recipe.text if recipe.text is not None else _builtin_text(recipe.corpus)
            fresh = default_tokenizer(recipe.tokenizer, text)
            config, train_config = recipe.configs(fresh.vocab_size)
        if session.model is not None:
            problem = _mismatch(session, config, fresh)
            if problem:
                raise gr.Error(
                    f"Your settings describe a different model than the one you trained ({problem}). "
                    "Press Reset to start a new model, or change the settings back to continue training it."
                )
            config = session.model.config
        else:
            self._check_size(config)
            self.registry.claim_model(session)
        start = _step(session)
        if start >= train_config.max_iters:
            raise gr.Error(
                f"The model has already trained {start} of {train_config.max_iters} steps: raise Steps to "
                "train it further, or press Reset to start over."
            )
        with validate.user_errors():
            data = self._tokens(recipe, text, fresh, config.block_size)
            # a new model's weights come from the form's seed, like its batches: same seed, same run
            model = session.model if session.model is not None else GPT(
                config, generator=torch.Generator().manual_seed(train_config.seed))
            trainer = Trainer(model, data, train_config, tokenizer=fresh)
        state = _training_state(session)
        if state is not None:  # optimizer, step, history, random states
            with validate.user_errors():
                trainer.load_state_dict(state)
            session.resume_state = None
        else:  # a new model, or a checkpoint without a training state: its steps and curve go on
            trainer.step, trainer.history = start, list(session.history)
        note = (f"Continuing from step {start}." if start else "Training a new model.")
        session.model, session.tokenizer, session.trainer = model, fresh, trainer
        session.train_config, session.corpus_name, session.history = train_config, recipe.corpus_title, trainer.history
        return trainer, train_config.max_iters, note

    def _tokens(self, recipe: Recipe, text: str, tokenizer: Tokenizer, block_size: int) -> TokenData:
        if recipe.text is None:
            return _builtin_tokens(recipe.corpus, json.dumps(tokenizer.spec()), block_size)
        return TokenData.from_text(text, tokenizer, block_size)

    def _run(self, session: Session, trainer: Trainer, until: int):
        # The first update goes out after the first step; the first sample waits SAMPLE_INTERVAL_S
        # (an untrained model writes noise, and sampling would delay the first chart).
        last_ui = last_attention = 0.0
        last_sample = time.monotonic()
        for event in trainer.run(until):
            if session.stop_requested:
                trainer.stop()
            now = time.monotonic()
            if not event.done and now - last_ui < UI_INTERVAL_S:
                continue
            last_ui = now
            self.registry.touch(session)
            if event.error:
                raise gr.Error(event.error)
            sample = attention = gr.skip()  # unchanged unless due
            if event.done or now - last_sample >= SAMPLE_INTERVAL_S:
                sample, last_sample = trainer.sample(), now
            if event.done or now - last_attention >= ATTENTION_INTERVAL_S:
                attention, last_attention = self._attention_figure(trainer), now
            yield self._update(
                session, status=_status(event), event=event, sample=sample, attention=attention,
                model_changed=_describe(session) if event.done else gr.skip(),
            )

    def _attention_figure(self, trainer: Trainer):
        per_layer = trainer.probe_attention()  # per layer (H, T, T); none without attention
        if not per_layer:
            return _note_figure("This stage has no attention yet: its tokens cannot look at each other.")
        return live_heatmap(torch.stack(per_layer), token_labels(trainer.tokenizer, trainer.probe_ids))

    def _update(self, session: Session, *, status: str, event=None, sample=gr.skip(), attention=gr.skip(),
                model_changed=gr.skip()) -> tuple:
        progress = _progress_html(event) if event is not None else gr.skip()
        return status, progress, loss_figure(session.history, event.max_iters if event else None), sample, attention, model_changed

    def stop(self, request: gr.Request) -> str:
        """Ask this session's training to stop after the current step; the weights are kept."""
        session = self.registry.peek(request)
        if session is None or not session.busy:
            return "Nothing is training."
        session.stop_requested = True
        session.stop_work()
        return "Stopping after this step; the weights learned so far are kept."

    def reset(self, request: gr.Request) -> tuple:
        """Forget this session's model (not while it trains)."""
        with self.registry.job(request, "reset") as session:
            session.model = session.tokenizer = session.trainer = session.train_config = None
            session.corpus_name, session.history, session.resume_state = None, [], None
            session.last_text, session.last_steps = "", []
        return "Model discarded. Press Train to start a new one.", _progress_html(None), loss_figure([]), "", _note_figure(
            "Press Train: the attention of each head on a probe prompt appears here."
        ), ""

    def apply_preset(self, name: str) -> tuple:
        """The preset's corpus, tokenizer and settings (capped to this server) for the form fields."""
        preset = get_preset(validate.choice(name, "Preset", PRESETS))
        s, model, train = self.settings, preset.model, preset.train
        capped = {
            "n_layer": min(model["n_layer"], s.max_layers), "n_head": min(model["n_head"], s.max_heads),
            "n_embd": min(model["n_embd"], s.max_embd), "block_size": min(model["block_size"], s.max_block_size),
            "batch_size": min(train["batch_size"], s.max_batch_size), "max_iters": min(train["max_iters"], s.max_iters),
        }
        reduced = [f"{k} {dict(model, **train)[k]} → {v}" for k, v in capped.items() if v != dict(model, **train)[k]]
        info = preset.description
        if reduced:
            info += f"\n\n⚠️ Reduced to this server's caps: {', '.join(reduced)} (lift them locally with `--no-caps`)."
        stage = stage_of(GPTConfig(vocab_size=2, **model)) or "gpt"
        return (
            info, preset.corpus, preset.tokenizer, stage, capped["n_layer"], capped["n_head"], capped["n_embd"],
            capped["block_size"], model.get("dropout", 0.0), capped["max_iters"], capped["batch_size"],
            train["learning_rate"], train.get("warmup_iters", 0), train.get("eval_interval", 100),
            train.get("weight_decay", 0.1), train.get("grad_clip", 1.0),
        )

    def save_checkpoint(self, request: gr.Request) -> str:
        """The session's model as a .zip checkpoint to download."""
        with self.registry.job(request, "saving a checkpoint") as session:
            if session.model is None:
                raise gr.Error("There is no model to save yet: train one first.")
            meta = {
                "corpus": session.corpus_name, "steps": _step(session), "history": session.history,
                "train_config": session.train_config.to_dict() if session.train_config else None,
            }
            folder = self._folder(session)
            shutil.rmtree(folder, ignore_errors=True)  # only the latest checkpoint of a session is kept
            with validate.user_errors():
                return str(save_archive(folder / f"gpt-step{_step(session)}.zip", session.model, session.tokenizer, meta,
                                        trainer_state=self._downloadable_state(session)))

    def _downloadable_state(self, session: Session) -> dict | None:
        """The training state, if the download can still be uploaded here with it: weights plus
        AdamW's two moments are about 12 bytes a parameter."""
        if 12 * session.model.parameter_counts()["total"] > 0.9 * self.settings.max_upload_bytes:
            return None
        return _training_state(session)

    def load_checkpoint(self, upload, request: gr.Request) -> tuple:
        """Replace the session's model with an uploaded checkpoint, and set the form to match it."""
        if not upload:
            raise gr.Error("Choose a checkpoint .zip to upload.")
        path = _upload_path(upload)
        with self.registry.job(request, "loading a checkpoint") as session:
            with validate.user_errors():
                # The caps are checked on the checkpoint's config before a byte of weights is read,
                # and every member is read with a bound that config implies.
                model, tokenizer, meta = load_checkpoint_file(path, check_config=self._check_caps)
                resume_state = load_trainer_state(path, config=model.config, max_history=self.settings.max_iters)
            history = meta.get("history", [])
            self.registry.claim_model(session)
            session.model, session.tokenizer, session.trainer = model.train(), tokenizer, None
            session.history, session.train_config, session.resume_state = history, None, resume_state
            session.corpus_name = str(meta.get("corpus") or "an uploaded checkpoint")
            session.last_text, session.last_steps = "", []
        config = model.config
        kind = tokenizer.spec()["kind"]
        status = (f"Loaded a {config.n_layer}-layer model ({model.parameter_counts()['total']:,} parameters, "
                  f"step {_step(session)}). Generate with it, inspect it, or pick its corpus and press Train to continue.")
        return (
            status, loss_figure(history), kind, stage_of(config) or "gpt", config.n_layer, config.n_head,
            config.n_embd, config.block_size, config.dropout, _describe(session),
        )

    def _check_caps(self, config: GPTConfig) -> None:
        s = self.settings
        for field, name, cap in (("n_layer", "Layers", "max_layers"), ("n_head", "Heads", "max_heads"),
                                 ("n_embd", "Embedding size", "max_embd"), ("block_size", "Block size", "max_block_size")):
            validate.integer(getattr(config, field), f"The checkpoint's {name.lower()}", 0, getattr(s, cap),
                             cap=s.cap_hint(cap))
        self._check_size(config)

    def _folder(self, session: Session) -> Path:
        """The session's download folder, named by the server's id for it (never the client's hash)."""
        return self.scratch / session.id

    def free(self, session: Session) -> None:
        shutil.rmtree(self._folder(session), ignore_errors=True)


# ------------------------------------------------------------------ small helpers


def _upload_path(upload) -> str:
    """gr.File gives a path string (type='filepath'); the API may send a dict with a path."""
    path = upload.get("path") if isinstance(upload, dict) else upload
    if not isinstance(path, str):
        raise gr.Error("The upload did not arrive as a file.")
    return path


def _training_state(session: Session) -> dict | None:
    """What Train continues from: the live trainer's state, or an uploaded checkpoint's (or None)."""
    return session.trainer.state_dict() if session.trainer is not None else session.resume_state


def _step(session: Session) -> int:
    if session.trainer is not None:
        return session.trainer.step
    return session.history[-1]["step"] if session.history else 0


def _mismatch(session: Session, config: GPTConfig, tokenizer: Tokenizer) -> str:
    """What differs between the session's model and the one the settings describe ('' if nothing)."""
    current = session.model.config
    diffs = [f"{f} {getattr(current, f)} → {getattr(config, f)}" for f in MODEL_FIELDS if getattr(current, f) != getattr(config, f)]
    if stage_of(current) != stage_of(config):
        diffs.append(f"stage {stage_of(current) or 'custom'} → {stage_of(config)}")
    if session.tokenizer.spec() != tokenizer.spec():
        diffs.append(
            "tokenizer " + session.tokenizer.spec()["kind"] + " → " + tokenizer.spec()["kind"]
            if session.tokenizer.spec()["kind"] != tokenizer.spec()["kind"]
            else f"another corpus: vocabulary of {session.tokenizer.vocab_size} → {tokenizer.vocab_size} characters"
        )
    return "; ".join(diffs)


def _describe(session: Session) -> str:
    """One line about the session's model, shown by other tabs ('' when there is none)."""
    if session.model is None:
        return ""
    c = session.model.config
    return (f"{c.n_layer} layers × {c.n_head} heads, {c.n_embd} channels, context {c.block_size}, "
            f"vocabulary {c.vocab_size:,}; trained {_step(session)} steps on {session.corpus_name}.")


def _status(event) -> str:
    if event.stopped:
        return f"Stopped at step {event.step}. The weights are kept: press Train to continue."
    if event.done:
        val = f", validation loss {event.val_loss:.3f}" if event.val_loss is not None else ""
        return f"Done: {event.step} steps, training loss {event.train_loss:.3f}{val}."
    return "Training..."


def _progress_html(event) -> str:
    if event is None:
        return "<div class='train-progress'><div class='bar'><div style='width:0%'></div></div><span>Not trained yet.</span></div>"
    percent = 100.0 * event.step / max(1, event.max_iters)
    val = f" · val {event.val_loss:.3f}" if event.val_loss is not None else ""
    left = "" if event.done else f" · {_duration(event.eta)} left"
    return (
        f"<div class='train-progress'><div class='bar'><div style='width:{percent:.1f}%'></div></div>"
        f"<span>step {event.step:,} / {event.max_iters:,} · loss {event.train_loss:.3f}{val} · "
        f"{event.tokens_per_sec:,.0f} tokens/s{left}</span></div>"
    )


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _show_corpus_inputs(corpus: str) -> tuple:
    """The paste box and the file picker, each shown only for its corpus choice."""
    return gr.update(visible=corpus == PASTE), gr.update(visible=corpus == UPLOAD)


def _note_figure(text: str):
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=13, color="#6b7280"))
    fig.update_layout(height=220, template="plotly_white", xaxis=dict(visible=False), yaxis=dict(visible=False),
                      margin=dict(l=10, r=10, t=10, b=10))
    return fig


# ------------------------------------------------------------------ layout


def build(ctx: AppContext) -> TrainHandlers:
    s = ctx.settings
    handlers = TrainHandlers(ctx)
    ctx.registry.on_free(handlers.free)
    preset_values = handlers.apply_preset(DEFAULT_PRESET)
    (info, corpus0, tokenizer0, stage0, layers0, heads0, embd0, block0, dropout0, steps0, batch0, lr0,
     warmup0, eval0, wd0, clip0) = preset_values

    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=340):
            preset = gr.Dropdown([(p.title, p.name) for p in PRESETS.values()], value=DEFAULT_PRESET,
                                 label="Preset", info="A recipe for everything below; change any field after.")
            preset_info = gr.Markdown(info, label="About this preset", elem_classes="preset-info")
            with gr.Accordion("Data", open=True):
                corpus = gr.Dropdown(CORPUS_CHOICES, value=corpus0, label="Corpus")
                text = gr.Textbox("", label="Your text", lines=6, visible=False, max_lines=12,
                                  placeholder="Paste a few thousand characters or more.")
                upload = gr.File(label="Your .txt file (UTF-8)", file_types=[".txt"], type="filepath", visible=False)
                tokenizer = gr.Radio(TOKENIZER_CHOICES, value=tokenizer0, label="Tokenizer")
            with gr.Accordion("Model", open=True):
                stage = gr.Dropdown(STAGE_CHOICES, value=stage0, label="Stage of the progression (bigram → GPT)")
                with gr.Row():
                    n_layer = gr.Slider(1, s.max_layers, value=layers0, step=1, label="Layers")
                    n_head = gr.Slider(1, s.max_heads, value=heads0, step=1, label="Heads")
                with gr.Row():
                    n_embd = gr.Slider(8, s.max_embd, value=embd0, step=8, label="Embedding size (n_embd)")
                    block_size = gr.Slider(2, s.max_block_size, value=block0, step=1, label="Block size (context)")
                dropout = gr.Slider(0.0, 0.5, value=dropout0, step=0.05, label="Dropout")
                params = gr.Markdown(elem_id="param-count")
                if not s.caps_lifted:
                    gr.Markdown(
                        f"This server's caps: {s.max_layers} layers, {s.max_heads} heads, {s.max_embd} channels, "
                        f"context {s.max_block_size}, {s.max_params:,} parameters, {s.max_iters:,} steps. "
                        "On your own machine, `python -m playground --no-caps` lifts them.",
                        elem_classes="caps-note",
                    )
            with gr.Accordion("Training", open=True):
                with gr.Row():
                    steps = gr.Slider(1, s.max_iters, value=steps0, step=1, label="Steps")
                    batch = gr.Slider(1, s.max_batch_size, value=batch0, step=1, label="Batch size")
                with gr.Row():
                    lr = gr.Number(value=lr0, label="Learning rate", minimum=1e-6, maximum=1.0)
                    seed = gr.Number(value=1337, precision=0, label="Seed", minimum=0)
                with gr.Accordion("More settings", open=False):
                    with gr.Row():
                        warmup = gr.Number(value=warmup0, precision=0, label="Warmup steps", minimum=0)
                        eval_every = gr.Number(value=eval0, precision=0, label="Evaluate every (steps)", minimum=1)
                    with gr.Row():
                        weight_decay = gr.Number(value=wd0, label="Weight decay", minimum=0, maximum=1)
                        grad_clip = gr.Number(value=clip0, label="Gradient clip (0 = off)", minimum=0)
        with gr.Column(scale=3, min_width=420):
            with gr.Row():
                train_btn = gr.Button("Train", variant="primary", elem_id="train-button")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-button")
                reset_btn = gr.Button("Reset", elem_id="reset-button")
            status = gr.Markdown("Press **Train**: the default task trains in seconds.", label="Status",
                                 elem_id="train-status")
            progress = gr.HTML(_progress_html(None), label="Progress", elem_id="train-progress")
            loss_plot = gr.Plot(loss_figure([]), label="Loss", elem_id="loss-plot")
            sample = gr.Textbox(label="Live sample (the model writing, refreshed as it learns)", lines=4,
                                interactive=False, elem_id="live-sample", elem_classes="mono")
            attention_plot = gr.Plot(_note_figure("Press Train: the attention of each head on a probe prompt appears here."),
                                     label="Attention on a probe prompt", elem_id="live-attention")
            with gr.Accordion("Checkpoint: download or upload", open=False):
                with gr.Row():
                    save_btn = gr.Button("Prepare download (.zip)")
                    checkpoint_file = gr.File(label="Checkpoint", interactive=False)
                gr.Markdown("The download holds the weights and, for models that still fit the upload cap, "
                            "the optimizer's state: uploaded again, **Train** continues exactly where it stopped.")
                checkpoint_upload = gr.File(label="Upload a checkpoint .zip to continue or inspect it",
                                            file_types=[".zip"], type="filepath")

    form = [preset, corpus, tokenizer, stage, n_layer, n_head, n_embd, block_size, dropout, steps, batch, lr, seed,
            warmup, eval_every, weight_decay, grad_clip, text, upload]
    live = [status, progress, loss_plot, sample, attention_plot, ctx.model_changed]
    cheap = dict(**ctx.cheap(), show_progress="hidden")

    preset.change(handlers.apply_preset, preset, [preset_info, corpus, tokenizer, stage, n_layer, n_head, n_embd,
                  block_size, dropout, steps, batch, lr, warmup, eval_every, weight_decay, grad_clip],
                  api_name="preset", **cheap)
    corpus.change(_show_corpus_inputs, corpus, [text, upload],
                  api_visibility="private", **cheap)
    previewed = (corpus, tokenizer, stage, n_layer, n_head, n_embd, block_size, dropout, upload)
    gr.on([c.change for c in previewed] + [text.blur, ctx.demo.load], handlers.preview, form, params,
          api_name="preview", api_visibility="private", **cheap)  # the UI's live count; scripts call /train
    train_btn.click(handlers.train, form, live, api_name="train", **ctx.heavy("train"))
    stop_btn.click(handlers.stop, None, status, api_name="stop", **cheap)
    reset_btn.click(handlers.reset, None, live, api_name="reset", **cheap)
    # One checkpoint at a time on the whole server: each briefly holds a model's bytes twice.
    one_at_a_time = dict(**ctx.heavy("checkpoint"), show_progress="minimal")
    save_btn.click(handlers.save_checkpoint, None, checkpoint_file, api_name="save_checkpoint", **one_at_a_time)
    checkpoint_upload.upload(
        handlers.load_checkpoint, checkpoint_upload,
        [status, loss_plot, tokenizer, stage, n_layer, n_head, n_embd, block_size, dropout, ctx.model_changed],
        api_name="load_checkpoint", **one_at_a_time,
    )
    return handlers
