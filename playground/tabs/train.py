"""Train tab: pick a corpus, tokenizer and model, train live, stop, continue, save and load.

The handlers live in `TrainHandlers` so tests can call them as plain functions with a session
id string instead of a gr.Request. `build(ctx)` lays out the tab and wires the events:
/train (streams; continues the session's model), /train_new (discards it first), /stop, /preset,
/save_checkpoint, /load_checkpoint (and the UI-only preview: the parameter count and what Train
will do). The form is declared once, as `TrainForm`.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import inspect
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import torch
from gradio.components.plot import PlotData

from core.checkpoint import load as load_checkpoint_file
from core.checkpoint import load_trainer_state
from core.checkpoint import save_archive
from core.config import STAGES, GPTConfig, stage_of
from core.data import CORPORA, TokenData, corpus_text, default_tokenizer, load_shakespeare, read_text_file
from core.data import DataError, check_user_text
from core.model import GPT
from core.movie import MOVIE_BYTES, SCORED, AttentionMovie, evenly, induction_onset, movie_gif
from core.presets import PRESETS, get_preset, preset_configs
from core.tokenizers import Tokenizer, token_labels, tokenizer_from_spec
from core.train import TrainConfig, Trainer
from playground import validate
from playground.context import AppContext
from playground.figures import note_figure
from playground.figures.attention import live_heatmap, replay_heatmap
from playground.figures.training import head_scores_figure, loss_figure
from playground.sessions import Session, TrainedModel, model_title
from playground.settings import Settings
from playground.tabs import compare

DEFAULT_PRESET = "repeat"  # offline, about ten seconds on one core, and a clear falling curve
PASTE, UPLOAD = "paste", "upload"
CORPUS_CHOICES = [(info.title, name) for name, info in CORPORA.items()] + [
    ("Paste your own text", PASTE), ("Upload a .txt file", UPLOAD),
]
TOKENIZER_CHOICES = [("Characters", "char"), ("GPT-2 BPE (50,257 tokens)", "gpt2")]
STAGE_CHOICES = [(f"{i + 1}. {stage.title}: {stage.description}", name) for i, (name, stage) in enumerate(STAGES.items())]
UI_INTERVAL_S = 0.25  # live view refresh: 4 a second, so a long run never floods the browser
# Up to this many trainings per compute slot refresh at the rates here; beyond, every refresh comes
# proportionally less often, so sixty learners' refreshes cost the server no more than four's on two
# cores (measured at 60: refreshes at twice this rate made the first points 15% and the runs 20% slower).
FULL_RATE_PER_SLOT = 2
# Live samples and attention maps run the model (a 120-token sample costs as much as several
# steps): each run spends at most this fraction of its training's own compute time on them (less
# on a crowded server, as refreshes slow down), so the steps keep the CPU.
VIEW_BUDGET = 0.15
STOP_WAIT_S = 3.0  # Stop answers once training has ended, waiting at most this long
NO_ATTENTION_YET = "Press Train: the attention of each head on a probe prompt appears here."
ATTENTION_INTERVAL_S = 0.5  # the heatmap grid is the heaviest payload (~150 KB for 6 x 8 heads): 2 a second
SAMPLE_INTERVAL_S = 2.0  # a fresh live sample costs sample_tokens forward passes
SAMPLE_TOKENS = 120
# The attention movie: a snapshot every max_iters // MOVIE_FRAMES steps (and at the last step), so a run
# has up to about this many; past MOVIE_BYTES the movie keeps every other one and records half as often.
MOVIE_FRAMES = 80
NO_MOVIE = "Press **Train**: the attention on the probe prompt is recorded as the model learns, to replay here."
NO_REPLAY = "Train a model, then drag the slider to replay its attention over training."
NO_SCORES = "Each head's pattern scores over training appear here."
JSON_PER_VALUE = 7  # characters of a map value in /attention_movie's JSON: "0.123, "
PLAY, PAUSE = "▶ Play", "⏸ Pause"
PLAY_INTERVAL_S = 0.4  # one snapshot after another: 80 snapshots play in about half a minute
# Break-it switches, GPTConfig fields: each removes something attention needs. (label, what to expect when off)
BREAK_IT = {
    "causal": ("Causal mask", "Off: every token also sees the future. The training loss collapses toward 0 while "
                              "generation is garbage: at generation time there is no future to copy."),
    "scale_attention": ("Scale by √d", "Off: scores are not divided by √(head size), so the softmax saturates: "
                                       "one key takes all the weight. Watch the maps go hard; Compare runs shows "
                                       "their entropy fall against a run with it on."),
    "use_position_embedding": ("Position embeddings", "Off: no token knows where it sits. One layer reads a bag of "
                                                      "tokens; deeper, only the causal mask leaks some order. On "
                                                      "the copy task it struggles to tell which letter comes next."),
}
# The model fields the tab controls; a trained model continues only if these still match.
MODEL_FIELDS = ("n_layer", "n_head", "n_embd", "block_size", "dropout", *BREAK_IT)


@dataclass(frozen=True)
class TrainForm:
    """The Train tab's form as it arrives: one field per input, in the API's order, raw (any JSON a
    request carries; `TrainHandlers.recipe` checks it).

    Declared once: the tab registers a component under each field's name, the handlers that take
    the form get these fields as their parameters (`takes_the_form`, which also names the API's
    keywords), and presets and checkpoints fill the form by field name.
    """

    preset: Any = DEFAULT_PRESET
    corpus: Any = DEFAULT_PRESET
    tokenizer: Any = "char"
    stage: Any = "gpt"
    n_layer: Any = None
    n_head: Any = None
    n_embd: Any = None
    block_size: Any = None
    dropout: Any = 0.0
    causal: Any = True
    scale_attention: Any = True
    use_position_embedding: Any = True
    steps: Any = None
    batch_size: Any = None
    learning_rate: Any = None
    seed: Any = 1337
    warmup: Any = 0
    eval_interval: Any = 100
    weight_decay: Any = 0.1
    grad_clip: Any = 1.0
    text: Any = ""
    upload: Any = None


FORM_FIELDS = tuple(field.name for field in dataclasses.fields(TrainForm))


def takes_the_form(method: Callable) -> Callable:
    """`method(self, form: TrainForm, request)` as a Gradio handler whose parameters are the form's
    fields, one per input component (Gradio passes inputs positionally and names the API's keywords
    after the parameters), then `request`."""
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [inspect.Parameter(field.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=field.default)
                   for field in dataclasses.fields(TrainForm)]
    parameters.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                        annotation=gr.Request))
    signature = inspect.Signature(parameters)  # a bound method shows it without `self`

    def split(args: tuple, kwargs: dict) -> tuple:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        return values["self"], TrainForm(**{name: values[name] for name in FORM_FIELDS}), values["request"]
    if inspect.isgeneratorfunction(method):
        def handler(*args, **kwargs):
            self, form, request = split(args, kwargs)
            yield from method(self, form, request)
    else:
        def handler(*args, **kwargs):
            self, form, request = split(args, kwargs)
            return method(self, form, request)
    handler.__name__, handler.__qualname__, handler.__doc__ = method.__name__, method.__qualname__, method.__doc__
    handler.__signature__ = signature
    handler.__annotations__ = {"request": gr.Request}  # Gradio finds the request by this annotation
    return handler


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
            # A stage's options win over the sliders (the one-head stage forces n_head=1); a break-it
            # switch turns a part off on top of the stage, never on where the stage leaves it out.
            options = {**self.model, **STAGES[self.stage].options, **self.train}
            options.update({name: options[name] and self.model[name] for name in BREAK_IT})
            return preset_configs(self.preset, vocab_size, **options)

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
    return TokenData.from_text(_builtin_text(name), tokenizer_from_spec(json.loads(tokenizer_spec)), block_size,
                               answer_after=CORPORA[name].answer_after)


def _corpus_vocab_text(corpus: str) -> str | None:
    """A built-in corpus's text for previews, without downloading anything (None if not here yet)."""
    if corpus == "shakespeare":
        try:
            return _local_shakespeare()
        except DataError:
            return None
    return _builtin_text(corpus)


@functools.lru_cache(maxsize=1)
def _local_shakespeare() -> str:
    """Read and hash-checked once, not on every preview (each change of the form asks); a failure
    is not cached, so a later download is found."""
    return load_shakespeare(download=False)


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

    def recipe(self, form: TrainForm) -> Recipe:
        """Check every input (the browser is no guarantee) and read pasted or uploaded text."""
        s, f = self.settings, form
        preset = validate.choice(f.preset, "Preset", PRESETS)
        corpus = validate.choice(f.corpus, "Corpus", [name for _, name in CORPUS_CHOICES])
        tokenizer = validate.choice(f.tokenizer, "Tokenizer", [name for _, name in TOKENIZER_CHOICES])
        stage = validate.choice(f.stage, "Stage", STAGES)
        model = dict(
            n_layer=validate.integer(f.n_layer, "Layers", 1, s.max_layers, cap=s.cap_hint("max_layers")),
            n_head=validate.integer(f.n_head, "Heads", 1, s.max_heads, cap=s.cap_hint("max_heads")),
            n_embd=validate.integer(f.n_embd, "Embedding size", 1, s.max_embd, cap=s.cap_hint("max_embd")),
            block_size=validate.integer(f.block_size, "Block size", 1, s.max_block_size,
                                        cap=s.cap_hint("max_block_size")),
            dropout=validate.number(f.dropout, "Dropout", 0.0, 0.9),
            **{name: _switch(getattr(f, name), label) for name, (label, _) in BREAK_IT.items()},
        )
        steps = validate.integer(f.steps, "Steps", 1, s.max_iters, cap=s.cap_hint("max_iters"))
        train = dict(
            max_iters=steps,
            lr_decay_iters=steps,
            batch_size=validate.integer(f.batch_size, "Batch size", 1, s.max_batch_size,
                                        cap=s.cap_hint("max_batch_size")),
            learning_rate=validate.number(f.learning_rate, "Learning rate", 1e-6, 1.0),
            seed=validate.integer(f.seed, "Seed", 0, 2**31 - 1),
            warmup_iters=validate.integer(f.warmup, "Warmup steps", 0, s.max_iters),
            eval_interval=validate.integer(f.eval_interval, "Evaluate every", 1, s.max_iters),
            weight_decay=validate.number(f.weight_decay, "Weight decay", 0.0, 1.0),
            grad_clip=validate.number(f.grad_clip, "Gradient clip", 0.0, 100.0),
            sample_tokens=SAMPLE_TOKENS,  # the live sample's length (the UI decides when to draw one)
        )
        # The schedule decays to the preset's floor, never above the chosen rate.
        train["min_lr"] = min(train["learning_rate"], get_preset(preset).train.get("min_lr", train["learning_rate"] / 10))
        user_text = None
        with validate.user_errors():
            if corpus == PASTE:
                text = validate.text(f.text, "Your text", s.max_text_chars, cap=s.cap_hint("max_text_chars"))
                # The character cap above is the limit; UTF-8 takes at most 4 bytes per character.
                user_text = check_user_text(text, min_chars=model["block_size"], max_bytes=4 * s.max_text_chars)
            elif corpus == UPLOAD:
                if not f.upload:
                    raise gr.Error("Upload a .txt file first (or pick another corpus).")
                user_text = read_text_file(_upload_path(f.upload), min_chars=model["block_size"], max_bytes=s.max_text_chars)
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

    @takes_the_form
    def preview(self, form: TrainForm, request: gr.Request | str | None) -> tuple[str, str]:
        """(the parameter count of the model these settings describe, what Train will do with them),
        shown as the form changes: the second beside the buttons, before anything is pressed."""
        try:
            recipe = self.recipe(form)
            text = recipe.text if recipe.text is not None else _corpus_vocab_text(recipe.corpus)
            if text is None and recipe.tokenizer == "char":
                return "The parameter count appears once Tiny Shakespeare is downloaded (press **Train**).", ""
            tokenizer = default_tokenizer(recipe.tokenizer, text or "")
            config, _ = recipe.configs(tokenizer.vocab_size)
            counts = self._check_size(config).parameter_counts()
        except (gr.Error, ValueError) as error:  # shown as it is typed, not as an error
            return f"⚠️ {error.message if isinstance(error, gr.Error) else error}", ""
        parts = ", ".join(f"{label} {count:,}" for label, count in _count_parts(counts) if count)
        count = f"**{counts['total']:,} parameters** ({parts}); vocabulary {config.vocab_size:,} tokens."
        session = self.registry.peek(request) if request is not None else None
        if session is not None and session.trainer is not None and session.trainer.running:
            return count, "Training now: **Stop** ends it and keeps what it has learned."
        if session is None or session.model is None:
            return count, "**Train** starts a new model with these settings."
        return count, (self._choice_needed(session, config, tokenizer, recipe.train["max_iters"])
                       or f"**Train** continues your model from step {session.trained.step}; **New model** starts afresh.")

    @takes_the_form
    def train(self, form: TrainForm, request: gr.Request | str):
        """Stream training: (status, progress html, loss figure, sample, attention figure, model_changed).
        Continues the session's model while the settings still describe it."""
        yield from self._train(form, request, new=False)

    @takes_the_form
    def train_new(self, form: TrainForm, request: gr.Request | str):
        """Like `train`, but discards the session's model first: a new one with these settings."""
        yield from self._train(form, request, new=True)

    def _train(self, form: TrainForm, request: gr.Request | str, new: bool):
        recipe = self.recipe(form)
        with self.registry.job(request, "training") as session:
            session.stop_requested = False
            if recipe.corpus == "shakespeare" and _corpus_vocab_text("shakespeare") is None:
                yield self._update(session, status="Downloading Tiny Shakespeare (once, 1.1 MB)...")
            with validate.user_errors():
                text = recipe.text if recipe.text is not None else _builtin_text(recipe.corpus)
                tokenizer = default_tokenizer(recipe.tokenizer, text)
                config, train_config = recipe.configs(tokenizer.vocab_size)
            if new:
                _discard(session)
            # A choice to make is not an error: the status says what to do, and nothing else changes.
            choice = self._choice_needed(session, config, tokenizer, train_config.max_iters)
            if choice:
                yield self._update(session, status=choice)
                return
            trainer, until, note = self._prepare(session, recipe, text, tokenizer, config, train_config)
            yield from self._run(session, trainer, until, opening=note)

    def _choice_needed(self, session: Session, config: GPTConfig, tokenizer: Tokenizer, steps: int) -> str:
        """Why Train cannot continue the session's model with these settings ('' when it can)."""
        if session.model is None:
            return ""
        problem = _mismatch(session.trained, config, tokenizer)
        if problem:
            return (f"⚠️ These settings describe a different model than the one you trained ({problem}). "
                    "Press **New model** to train one with them (yours is discarded), or change them back "
                    "and press **Train** to continue yours.")
        if session.trained.step >= steps:
            return (f"Your model has already trained {session.trained.step} of {steps} steps: raise **Steps** to train "
                    "it further, or press **New model** to start over.")
        return ""

    def _prepare(self, session: Session, recipe: Recipe, text: str, fresh: Tokenizer, config: GPTConfig,
                 train_config: TrainConfig) -> tuple[Trainer, int, str]:
        """The trainer to run: the session's model continued (`_choice_needed` said it can), or a new one."""
        session.pretrained = None  # Generate and Attention follow the model trained now, not GPT-2
        trained = session.trained
        if trained is not None:
            config = trained.model.config
        else:
            self._check_size(config)
            self.registry.claim_model(session)
        with validate.user_errors():
            data = self._tokens(recipe, text, fresh, config.block_size)
            # a new model's weights come from the form's seed, like its batches: same seed, same run
            model = trained.model if trained is not None else GPT(
                config, generator=torch.Generator().manual_seed(train_config.seed))
            trainer = Trainer(model, data, train_config, tokenizer=fresh, share=self.ctx.share)
        start = 0 if trained is None else trained.step
        state = None if trained is None else trained.training_state()
        if state is not None:  # optimizer, step, history, random states
            with validate.user_errors():
                trainer.load_state_dict(state)
        elif trained is not None:  # a checkpoint without a training state: its steps and curve go on
            trainer.step, trainer.history = start, list(trained.history)
        note = (f"Continuing from step {start}" if start else "Training a new model")
        movie = _movie(trained.movie if trained is not None else None, trainer, train_config.max_iters)
        run = trained.run if trained is not None and trained.run else session.runs.new_number()
        session.trained = TrainedModel(model, fresh, recipe.corpus_title, trainer.history, trainer, train_config,
                                       movie=movie, run=run)
        return trainer, train_config.max_iters, note

    def _tokens(self, recipe: Recipe, text: str, tokenizer: Tokenizer, block_size: int) -> TokenData:
        if recipe.text is None:
            return _builtin_tokens(recipe.corpus, json.dumps(tokenizer.spec()), block_size)
        return TokenData.from_text(text, tokenizer, block_size)

    def _run(self, session: Session, trainer: Trainer, until: int, opening: str):
        """Stream the run's updates; the first (after the first step) says `opening` as its status."""
        # The first update goes out after the first step, with the chart alone: the first sample and
        # attention map wait their intervals (an untrained model shows noise, and drawing it would
        # delay the first chart).
        last_ui = 0.0
        last_sample = last_attention = time.monotonic()
        # Every update sends every output: Gradio rebuilds a component for each gr.skip() in a stream
        # (its config and schema: the costliest part of an update), while an unchanged value costs
        # an equality check. So the last sample, map and model description go out again.
        sample, attention = "", _note_plot("The attention map appears after a few steps.")
        described, first = _describe(session), True
        share, trained_before, viewing = self.ctx.share, trainer.elapsed, 0.0
        movie, scores, scored_step = session.trained.movie, _note_plot(NO_SCORES), None
        for event in trainer.run(until):
            if session.stop_requested:
                trainer.stop()
            now, sharing = time.monotonic(), share.members
            slower = max(1.0, sharing / (FULL_RATE_PER_SLOT * share.slots))
            if movie is not None and not event.error and _snapshot_due(
                    movie, event, viewing <= VIEW_BUDGET / slower * (trainer.elapsed - trained_before)):
                with trainer.turn() as granted:  # a snapshot is counted like the live views
                    started = time.perf_counter()
                    if granted or event.done:  # the last step always has its snapshot, a stopped run's too
                        movie.add(event.step, trainer.probe_attention())
                    viewing += time.perf_counter() - started
            if not event.done and now - last_ui < UI_INTERVAL_S * slower:
                continue
            last_ui = now
            self.registry.touch(session)
            if event.error:
                raise gr.Error(event.error)
            finished = event.done and not event.stopped  # a Stop ends at once: no fresh sample to wait for
            affordable = viewing <= VIEW_BUDGET / slower * (trainer.elapsed - trained_before)
            sample_due = finished or (affordable and now - last_sample >= SAMPLE_INTERVAL_S)
            attention_due = finished or (affordable and now - last_attention >= ATTENTION_INTERVAL_S)
            if sample_due or attention_due:
                with trainer.turn() as granted:  # the model's work takes its turn like a step
                    started = time.perf_counter()
                    if granted and sample_due:
                        sample, last_sample = trainer.sample(), now
                    if granted and attention_due:
                        attention, last_attention = self._attention_figure(trainer), now
                    viewing += time.perf_counter() - started
            if event.done:
                described = _describe(session)  # other tabs follow the model once the run ends
            frames = [] if movie is None else movie.frames
            if frames and frames[-1].step != scored_step:  # drawn again only when a snapshot came
                scores, scored_step = PlotData(type="plotly", plot=_scores_figure(movie).to_json()), frames[-1].step
            status = _status(event, sharing, opening if first else "Training")
            yield self._update(session, status=status, event=event, sample=sample, attention=attention,
                               model_changed=described, movie_note=_movie_note(movie, not event.done),
                               scores=scores)
            first = False
        compare.record(session, token_labels(trainer.tokenizer, trainer.probe_ids))

    def _attention_figure(self, trainer: Trainer):
        per_layer = trainer.probe_attention()  # per layer (H, T, T); none without attention
        if not per_layer:
            return _note_plot("This stage has no attention yet: its tokens cannot look at each other.")
        figure = live_heatmap(torch.stack(per_layer), token_labels(trainer.tokenizer, trainer.probe_ids))
        return PlotData(type="plotly", plot=figure.to_json())  # serialised once, though sent with every update

    def _update(self, session: Session, *, status: str, event=None, sample=gr.skip(), attention=gr.skip(),
                model_changed=gr.skip(), movie_note=gr.skip(), scores=gr.skip()) -> tuple:
        """(status, progress, loss figure, sample, attention, model_changed, movie note, head scores)."""
        history = [] if session.trained is None else session.trained.history
        progress = _progress_html(event, history) if event is not None else gr.skip()
        return (status, progress, loss_figure(history, event.max_iters if event else None), sample, attention,
                model_changed, movie_note, scores)

    # ---- the attention movie

    def replay(self, step, request: gr.Request) -> PlotData:
        """The attention grid of the snapshot nearest to training `step`, at or before it (a note when
        the session's model has none: the slider also moves after a run without attention)."""
        step = validate.number(step, "Replay step", 0)
        movie, frames = self._recorded(request)
        if not frames:
            return _note_plot(NO_REPLAY)
        frame = next((f for f in reversed(frames) if f.step <= step), frames[0])
        labels = token_labels(self._tokenizer_of(request), movie.probe_ids)
        return PlotData(type="plotly", plot=replay_heatmap(frame.maps.float(), labels, frame.step).to_json())

    def movie_range(self, request: gr.Request):
        """The replay slider spanning the recorded steps (while a run records more)."""
        return self._slider(request, to_last=False)

    def movie_after_run(self, request: gr.Request):
        """The replay slider spanning the recorded steps, on the last one."""
        return self._slider(request, to_last=True)

    def _slider(self, request: gr.Request | str, to_last: bool):
        _, frames = self._recorded(request)
        if not frames:
            return gr.update(maximum=1, value=0) if to_last else gr.skip()
        last = frames[-1].step
        return gr.update(maximum=last, value=last) if to_last else gr.update(maximum=last)

    def play(self, playing: bool, step, request: gr.Request) -> tuple:
        """Play or pause the replay: (playing, the timer, the button, the slider: back to the start if
        it stood at the end)."""
        if playing:
            return False, gr.Timer(active=False), PLAY, gr.skip()
        step = validate.number(step, "Replay step", 0)
        _, frames = self._movie_of(request)
        return True, gr.Timer(active=True), PAUSE, (0 if step >= frames[-1].step else gr.skip())

    def advance(self, step, request: gr.Request) -> tuple:
        """The timer's tick: (the slider on the next snapshot, playing, the timer, the button); after
        the last snapshot the replay pauses."""
        step = validate.number(step, "Replay step", 0)
        _, frames = self._recorded(request)  # none: a New model discarded the movie while it played
        later = next((frame.step for frame in frames if frame.step > step), None)
        if later is not None:
            return later, gr.skip(), gr.skip(), gr.skip()
        return gr.skip(), False, gr.Timer(active=False), PLAY

    def attention_movie(self, request: gr.Request) -> dict:
        """The session's attention over training: the probe's tokens, every snapshot's step, and per
        snapshot the (layer, head, query, key) maps rounded to 3 decimals with each head's pattern scores.
        Evenly thinned (the first and last kept) so the maps' JSON stays under the movie's memory cap."""
        movie, frames = self._movie_of(request)
        per_frame = frames[0].maps.numel() * JSON_PER_VALUE
        kept = evenly(frames, max(2, movie.max_bytes // per_frame))
        return {
            "probe_tokens": token_labels(self._tokenizer_of(request), movie.probe_ids),
            "steps": [frame.step for frame in kept], "recorded": len(frames), "bytes": movie.nbytes,
            "max_bytes": movie.max_bytes,
            # in double precision, so 0.123 is written as 0.123 and not as float32's 0.12300000339746475
            "frames": [{"step": frame.step, "maps": frame.maps.double().round(decimals=3).tolist(),
                        "scores": {name: None if score is None else score.double().round(decimals=3).tolist()
                                   for name, score in frame.scores.items()}} for frame in kept],
        }

    def movie_gif(self, request: gr.Request) -> str:
        """The session's attention movie as an animated GIF file to download."""
        with self.registry.job(request, "making the movie's GIF") as session:
            movie = None if session.trained is None else session.trained.movie
            if movie is None or not movie.frames:
                raise gr.Error("There is no attention movie yet: press Train (with a stage that has attention) to "
                               "record one.")
            path = self._folder(session) / f"attention-movie-step{movie.frames[-1].step}.gif"
            path.parent.mkdir(parents=True, exist_ok=True)
            for old in path.parent.glob("attention-movie-*.gif"):  # only the latest GIF of a session is kept
                old.unlink()
            path.write_bytes(movie_gif(movie))
            return str(path)

    def _recorded(self, request: gr.Request | str) -> tuple[AttentionMovie | None, list]:
        """The session's movie (or None) and its frames: a list as they are now, while a run adds more."""
        session = self.registry.peek(request)
        movie = None if session is None or session.trained is None else session.trained.movie
        return movie, [] if movie is None else movie.frames

    def _movie_of(self, request: gr.Request | str) -> tuple[AttentionMovie, list]:
        """The session's movie and its frames, or a gr.Error saying what to do."""
        movie, frames = self._recorded(request)
        if not frames:
            raise gr.Error("There is no attention movie yet: press Train on the Train tab (with a stage that has "
                           "attention), and the attention is recorded as the model learns.")
        return movie, frames

    def _tokenizer_of(self, request: gr.Request | str) -> Tokenizer:
        return self.registry.peek(request).trained.tokenizer

    def stop(self, request: gr.Request):
        """Stop this session's training after the current step; the weights are kept. Answers once the
        training has ended (or after STOP_WAIT_S), so the status it writes is the last word."""
        session = self.registry.peek(request)
        if session is None or session.job_name != "training":
            return gr.skip()  # nothing trains: leave the status ("Done: ...") as it is
        session.stop_work()
        deadline = time.monotonic() + STOP_WAIT_S
        while session.job_name == "training" and time.monotonic() < deadline:
            time.sleep(0.02)
        if session.job_name == "training":
            return "Stopping after this step; the weights learned so far are kept."
        return _stopped_status(session.trained.step)

    def describe_setup(self, preset: str, corpus: str) -> str:
        """The preset's description, or what the form now trains once the corpus is another one."""
        info = get_preset(validate.choice(preset, "Preset", PRESETS))
        corpus = validate.choice(corpus, "Corpus", [name for _, name in CORPUS_CHOICES])
        if corpus == info.corpus:
            return info.description
        title = dict((name, title) for title, name in CORPUS_CHOICES)[corpus]
        about = CORPORA[corpus].description if corpus in CORPORA else "Your own text: the model learns to continue it."
        return f"**{title}** with the model and training settings of the *{info.title}* preset. {about}"

    def apply_preset(self, name: str) -> dict[str, Any]:
        """The preset's form (capped to this server) by field name, and its description ("preset_info")."""
        preset = get_preset(validate.choice(name, "Preset", PRESETS))
        s, model, train = self.settings, preset.model, preset.train
        capped = {
            "n_layer": min(model["n_layer"], s.max_layers), "n_head": min(model["n_head"], s.max_heads),
            "n_embd": min(model["n_embd"], s.max_embd), "block_size": min(model["block_size"], s.max_block_size),
            "batch_size": min(train["batch_size"], s.max_batch_size), "steps": min(train["max_iters"], s.max_iters),
        }
        asked = {**model, **train, "steps": train["max_iters"]}
        reduced = [f"{k} {asked[k]} → {v}" for k, v in capped.items() if v != asked[k]]
        info = preset.description
        if reduced:
            info += f"\n\n⚠️ Reduced to this server's caps: {', '.join(reduced)} (lift them locally with `--no-caps`)."
        stage = stage_of(GPTConfig(vocab_size=2, **model)) or "gpt"
        return {
            "preset_info": info, "corpus": preset.corpus, "tokenizer": preset.tokenizer,
            "stage": stage, **capped, **_switches(model, stage),
            "dropout": model.get("dropout", 0.0), "learning_rate": train["learning_rate"],
            "warmup": train.get("warmup_iters", 0), "eval_interval": train.get("eval_interval", 100),
            "weight_decay": train.get("weight_decay", 0.1), "grad_clip": train.get("grad_clip", 1.0),
        }

    def default_form(self) -> TrainForm:
        """What the tab shows when it opens: the default preset."""
        values = self.apply_preset(DEFAULT_PRESET)
        return TrainForm(preset=DEFAULT_PRESET, **{k: v for k, v in values.items() if k in FORM_FIELDS})

    def save_checkpoint(self, request: gr.Request) -> str:
        """The session's model as a .zip checkpoint to download."""
        with self.registry.job(request, "saving a checkpoint") as session:
            trained = session.trained
            if trained is None:
                raise gr.Error("There is no model to save yet: train one first.")
            meta = {
                "corpus": trained.corpus_name, "steps": trained.step, "history": trained.history,
                "train_config": trained.train_config.to_dict() if trained.train_config else None,
            }
            folder = self._folder(session)
            shutil.rmtree(folder, ignore_errors=True)  # only the latest checkpoint of a session is kept
            with validate.user_errors():
                return str(save_archive(folder / f"gpt-step{trained.step}.zip", trained.model, trained.tokenizer,
                                        meta, trainer_state=self._downloadable_state(trained)))

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
        path = _upload_path(upload)
        with self.registry.job(request, "loading a checkpoint") as session:
            with validate.user_errors():
                # The caps are checked on the checkpoint's config before a byte of weights is read,
                # and every member is read with a bound that config implies.
                model, tokenizer, meta = load_checkpoint_file(path, check_config=self._check_caps)
                resume_state = load_trainer_state(path, config=model.config, max_history=self.settings.max_iters)
            history = meta.get("history", [])
            self.registry.claim_model(session)
            session.trained = TrainedModel(model.train(), tokenizer, meta.get("corpus") or "an uploaded checkpoint",
                                           history, resume_state=resume_state)
            session.pretrained = None  # Generate and Attention follow the model just loaded, not GPT-2
            session.last_text, session.last_steps = "", []
        config = model.config
        status = (f"Loaded {model_title(config)} ({model.parameter_counts()['total']:,} parameters, "
                  f"step {session.trained.step}). Generate with it, inspect it, or pick its corpus and press Train to continue.")
        return {
            "status": status, "loss_plot": loss_figure(history), "model_changed": _describe(session),
            # the movie and scores were the old model's: the upload has none until Train records one
            "movie_note": NO_MOVIE, "movie_plot": note_figure(NO_REPLAY), "head_scores": note_figure(NO_SCORES),
            "tokenizer": tokenizer.spec()["kind"], "stage": stage_of(config) or "gpt",
            **{name: getattr(config, name) for name in MODEL_FIELDS},
            **_switches(config.to_dict(), stage_of(config)),  # a bigram's switches stay on: its stage has none
        }

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


def _movie(movie: AttentionMovie | None, trainer: Trainer, until: int) -> AttentionMovie | None:
    """The run's attention movie: the model's own, continued, or a new one; None where the model has no
    attention or one snapshot of it would not fit the movie's memory."""
    config = trainer.model.config
    if not config.use_attention or config.n_layer == 0:
        return None
    if 2 * config.n_layer * config.n_head * len(trainer.probe_ids) ** 2 > MOVIE_BYTES:  # float16 maps
        return None
    if movie is None or movie.probe_ids != trainer.probe_ids:
        movie = AttentionMovie(trainer.probe_ids, max_bytes=MOVIE_BYTES)
    movie.every = max(movie.every, until // MOVIE_FRAMES, 1)  # a longer run: rarer snapshots
    return movie


def _snapshot_due(movie: AttentionMovie, event, affordable: bool) -> bool:
    """Whether to record this step: `movie.every` steps after the last snapshot, or as soon after as the
    view budget allows; and always the last step (once)."""
    last = movie.frames[-1].step if movie.frames else None
    if last == event.step:
        return False
    return event.done or (affordable and (last is None or event.step - last >= movie.every))


def _movie_note(movie: AttentionMovie | None, recording: bool) -> str:
    """What the movie holds, and its memory bound."""
    if movie is None:
        return "This model has no attention to record."
    count, every = len(movie.frames), "step" if movie.every == 1 else f"{movie.every} steps"
    return (f"{'Recording' if recording else 'Replay'}: {count} snapshot{'s' if count != 1 else ''} "
            f"(one every {every}), {movie.nbytes / 1024:,.1f} KB of at most {movie.max_bytes / 2**20:g} MiB.")


def _scores_figure(movie: AttentionMovie):
    return head_scores_figure({pattern: movie.score_curve(pattern) for pattern in SCORED}, induction_onset(movie))


def _shown() -> dict:
    return gr.update(visible=True)


def _upload_path(upload) -> str:
    """gr.File gives a path string (type='filepath'); the API may send a dict with a path."""
    path = upload.get("path") if isinstance(upload, dict) else upload
    if not isinstance(path, str):
        raise gr.Error("The upload did not arrive as a file.")
    return path


def _mismatch(trained: TrainedModel, config: GPTConfig, tokenizer: Tokenizer) -> str:
    """What differs between the trained model and the one the settings describe ('' if nothing)."""
    current = trained.model.config
    diffs = [_field_change(f, getattr(current, f), getattr(config, f)) for f in MODEL_FIELDS
             if getattr(current, f) != getattr(config, f)]
    if stage_of(current) != stage_of(config):
        diffs.append(f"stage {stage_of(current) or 'custom'} → {stage_of(config) or 'custom'}")
    ours, theirs = trained.tokenizer.spec(), tokenizer.spec()
    if ours != theirs:
        diffs.append(
            f"tokenizer {ours['kind']} → {theirs['kind']}" if ours["kind"] != theirs["kind"]
            else f"another corpus: vocabulary of {trained.tokenizer.vocab_size} → {tokenizer.vocab_size} characters"
        )
    return "; ".join(diffs)


def _field_change(field: str, before: Any, after: Any) -> str:
    """'n_head 2 → 4', or for a break-it switch 'Causal mask on → off'."""
    if field in BREAK_IT:
        return f"{BREAK_IT[field][0]} {'on' if before else 'off'} → {'on' if after else 'off'}"
    return f"{field} {before} → {after}"


def _switch(value: Any, name: str) -> bool:
    """A break-it checkbox: True or False (a shared link writes 1 or 0); a string such as "false" is refused."""
    return bool(validate.choice(value, name, (True, False)))


def _switches(model: dict, stage: str | None) -> dict[str, bool]:
    """The break-it checkboxes that show a model's `GPTConfig` fields: off only where the model lacks a
    part its stage has (a bigram has no position embedding by its stage, not by a switch)."""
    options = STAGES[stage].options if stage else {}
    return {name: bool(model.get(name, True)) or options.get(name) is False for name in BREAK_IT}


# Stages whose layers hold nothing a learner would count: tokens never look at each other.
def _describe(session: Session) -> str:
    """One line about the session's model, shown by other tabs ('' when there is none)."""
    return "" if session.trained is None else session.trained.describe()


def _count_parts(counts: dict[str, int]) -> list[tuple[str, int]]:
    """The parameter count's parts, which add up to its total (a tied head counts once)."""
    return [
        ("token embedding", counts["token_embedding"]), ("position embedding", counts["position_embedding"]),
        ("attention", counts["attention"]), ("feed-forward", counts["feed_forward"]),
        ("LayerNorms", counts["block_layer_norms"] + counts["final_layer_norm"]), ("LM head", counts["lm_head"]),
    ]


def _stopped_status(step: int) -> str:
    return f"Stopped at step {step}. The weights are kept: press **Train** to continue."


def _discard(session: Session) -> None:
    """Forget the session's model and everything that came with it."""
    session.trained = None
    session.last_text, session.last_steps = "", []


def _heads_for_stage(stage: str):
    """The Heads slider as the stage uses it: fixed at 1 for one head, idle without attention."""
    options = STAGES[validate.choice(stage, "Stage", STAGES)].options
    if "n_head" in options:
        return gr.update(value=options["n_head"], interactive=False, info="this stage has exactly one head")
    if not options.get("use_attention", True):
        return gr.update(interactive=False, info="no attention at this stage")
    return gr.update(interactive=True, info=None)


def _layers_for_stage(stage: str):
    """The Layers slider as the stage uses it: idle where the stage fixes the depth (its value stays,
    for the stages that take it)."""
    options = STAGES[validate.choice(stage, "Stage", STAGES)].options
    if "n_layer" in options:
        return gr.update(interactive=False, info=f"this stage has {options['n_layer']} layer, as in the lecture: "
                                                 "without residual connections, stacked layers do not train")
    return gr.update(interactive=True, info=None)


def _status(event, sharing: int = 1, doing: str = "Training") -> str:
    """What the run is `doing` ("Training a new model" on its first update); while others train
    too, how many share the server and the time left."""
    if event.stopped:
        return _stopped_status(event.step)
    if event.done:
        val = f", validation loss {event.val_loss:.3f}" if event.val_loss is not None else ""
        return f"Done: {event.step} steps, training loss {event.train_loss:.3f}{val}."
    if sharing > 1:
        return (f"{doing}: {sharing} trainings share this server, taking turns step by step; "
                f"about {_duration(event.eta)} left.")
    return "Training..." if doing == "Training" else f"{doing}."


def _progress_html(event, history: list[dict] = ()) -> str:
    """The progress bar and the run's figures; for a task corpus, how well it writes the answers
    (the whole-line loss has a floor there: the questions are random)."""
    if event is None:
        return "<div class='train-progress'><div class='bar'><div style='width:0%'></div></div><span>Not trained yet.</span></div>"
    percent = 100.0 * event.step / max(1, event.max_iters)
    val = f" · val {event.val_loss:.3f}" if event.val_loss is not None else ""
    left = "" if event.done else f" · {_duration(event.eta)} left"
    scored = next((row for row in reversed(history) if row.get("answer_accuracy") is not None), None)
    answers = ("" if scored is None else
               f"<span class='answers'>Answers (the half of each line that can be learned), validation: "
               f"<b>{scored['answer_accuracy']:.0%} right</b>, loss {scored['answer_loss']:.3f} "
               f"at step {scored['step']:,}.</span>")
    return (
        f"<div class='train-progress'><div class='bar'><div style='width:{percent:.1f}%'></div></div>"
        f"<span>step {event.step:,} / {event.max_iters:,} · loss {event.train_loss:.3f}{val} · "
        f"{event.tokens_per_sec:,.0f} tokens/s{left}</span>{answers}</div>"
    )


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _show_corpus_inputs(corpus: str) -> tuple:
    """The paste box and the file picker, each shown only for its corpus choice."""
    return gr.update(visible=corpus == PASTE), gr.update(visible=corpus == UPLOAD)


@functools.lru_cache(maxsize=4)
def _note_plot(text: str) -> PlotData:
    """`note_figure` serialised once, for a stream that sends it with every update."""
    return PlotData(type="plotly", plot=note_figure(text).to_json())


# ------------------------------------------------------------------ layout


def build(ctx: AppContext) -> TrainHandlers:
    from playground import share  # here, not at the top: share reads this module's form

    s = ctx.settings
    handlers = TrainHandlers(ctx)
    ctx.registry.on_free(handlers.free)
    start = handlers.default_form()
    form: dict[str, gr.Component] = {}  # TrainForm's fields, by name
    shown: dict[str, gr.Component] = {}  # what handlers set by name besides the form
    groups: dict[str, gr.Accordion] = {}  # the form's accordions, by share.GROUPS' names: a link may hide them

    # The buttons come first: on a phone the columns stack, and Train must not sit screens below.
    with gr.Row(elem_id="train-buttons"):
        train_btn = gr.Button("Train", variant="primary", elem_id="train-button")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-button")
        new_btn = gr.Button("New model", elem_id="new-model-button")
    next_step = gr.Markdown(elem_id="train-next")  # what Train will do: continue, or start a new model
    status = gr.Markdown("Press **Train**: the default task trains in seconds.", elem_id="train-status")
    progress = gr.HTML(_progress_html(None), elem_id="train-progress")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=300, elem_id="train-settings"):
            form["preset"] = gr.Dropdown([(p.title, p.name) for p in PRESETS.values()], value=start.preset,
                                         label="Preset", info="A recipe for everything below; change any field after.")
            shown["preset_info"] = gr.Markdown(handlers.describe_setup(start.preset, start.corpus),
                                               elem_classes="preset-info", elem_id="preset-info")
            link_note = gr.Markdown(visible=False, elem_id="link-note")  # what the page's link set and ignored
            with gr.Accordion("Data", open=True) as groups["data"]:
                form["corpus"] = gr.Dropdown(CORPUS_CHOICES, value=start.corpus, label="Corpus")
                form["text"] = gr.Textbox("", label="Your text", lines=6, visible=False, max_lines=12,
                                          placeholder="Paste a few thousand characters or more.")
                form["upload"] = gr.File(label="Your .txt file (UTF-8)", file_types=[".txt"], type="filepath",
                                         visible=False)
                form["tokenizer"] = gr.Radio(TOKENIZER_CHOICES, value=start.tokenizer, label="Tokenizer")
            with gr.Accordion("Model", open=True) as groups["model"]:
                form["stage"] = gr.Dropdown(STAGE_CHOICES, value=start.stage, elem_id="stage-dropdown",
                                            label="Stage of the progression (bigram → GPT)")
                with gr.Row():
                    form["n_layer"] = gr.Slider(1, s.max_layers, value=start.n_layer, step=1, label="Layers")
                    form["n_head"] = gr.Slider(1, s.max_heads, value=start.n_head, step=1, label="Heads",
                                               elem_id="heads-slider")
                with gr.Row():
                    form["n_embd"] = gr.Slider(8, s.max_embd, value=start.n_embd, step=8,
                                               label="Embedding size (n_embd)")
                    form["block_size"] = gr.Slider(2, s.max_block_size, value=start.block_size, step=1,
                                                   label="Block size (context)")
                form["dropout"] = gr.Slider(0.0, 0.5, value=start.dropout, step=0.05, label="Dropout")
                gr.Markdown("**Break it**: each switch removes something attention needs.", elem_classes="caps-note")
                for name, (label, info) in BREAK_IT.items():
                    form[name] = gr.Checkbox(getattr(start, name), label=label, info=info, elem_id=f"switch-{name}")
                params = gr.Markdown(elem_id="param-count")
                if not s.caps_lifted:
                    gr.Markdown(
                        f"This server's caps: {s.max_layers} layers, {s.max_heads} heads, {s.max_embd} channels, "
                        f"context {s.max_block_size}, {s.max_params:,} parameters, {s.max_iters:,} steps. "
                        "On your own machine, `python -m playground --no-caps` lifts them.",
                        elem_classes="caps-note",
                    )
            with gr.Accordion("Training", open=True) as groups["training"]:
                with gr.Row():
                    form["steps"] = gr.Slider(1, s.max_iters, value=start.steps, step=1, label="Steps")
                    form["batch_size"] = gr.Slider(1, s.max_batch_size, value=start.batch_size, step=1,
                                                   label="Batch size")
                with gr.Row():
                    form["learning_rate"] = gr.Number(value=start.learning_rate, label="Learning rate",
                                                      minimum=1e-6, maximum=1.0)
                    form["seed"] = gr.Number(value=start.seed, precision=0, label="Seed", minimum=0)
                with gr.Accordion("More settings", open=False):
                    with gr.Row():
                        form["warmup"] = gr.Number(value=start.warmup, precision=0, label="Warmup steps", minimum=0)
                        form["eval_interval"] = gr.Number(value=start.eval_interval, precision=0,
                                                          label="Evaluate every (steps)", minimum=1)
                    with gr.Row():
                        form["weight_decay"] = gr.Number(value=start.weight_decay, label="Weight decay",
                                                         minimum=0, maximum=1)
                        form["grad_clip"] = gr.Number(value=start.grad_clip, label="Gradient clip (0 = off)",
                                                      minimum=0)
            share_btn = gr.Button("Share this setup", size="sm", elem_id="share-button")
            share_link = gr.Textbox(label="Link to this setup", info="The same link trains the same curve.",
                                    buttons=["copy"], interactive=False, visible=False, elem_id="share-link")
        with gr.Column(scale=3, min_width=300, elem_id="train-live"):
            # The chart and the attention map side by side on a desktop: both in view while it trains.
            with gr.Row(equal_height=False):
                shown["loss_plot"] = gr.Plot(loss_figure([]), label="Loss", elem_id="loss-plot", min_width=280)
                attention_plot = gr.Plot(note_figure(NO_ATTENTION_YET), label="Attention on a probe prompt",
                                         elem_id="live-attention", min_width=280)
            # Under the chart, each head's scores over training; under the live map, its replay.
            with gr.Row(equal_height=False):
                head_scores = gr.Plot(note_figure(NO_SCORES), label="Head scores over training",
                                      elem_id="head-scores", min_width=280)
                with gr.Column(min_width=280, elem_id="movie"):
                    with gr.Row(equal_height=False):
                        movie_step = gr.Slider(0, 1, value=0, step=1, label="Replay: training step",
                                               elem_id="movie-step", scale=4)
                        play_btn = gr.Button(PLAY, size="sm", elem_id="movie-play", scale=1, min_width=90)
                    playing, ticks = gr.State(False), gr.Timer(PLAY_INTERVAL_S, active=False)
                    movie_note = gr.Markdown(NO_MOVIE, elem_id="movie-note")
                    movie_plot = gr.Plot(note_figure(NO_REPLAY), label="Replay", elem_id="movie-frame")
                    with gr.Row(equal_height=False):
                        gif_btn = gr.Button("Download the movie (GIF)", size="sm", elem_id="movie-gif-button",
                                            min_width=160)
                        gif_file = gr.File(label="Attention movie (GIF)", interactive=False, elem_id="movie-gif",
                                           min_width=160, visible=False)
            sample = gr.Textbox(label="Live sample (the model writing, refreshed as it learns)", lines=4,
                                interactive=False, elem_id="live-sample", elem_classes="mono")
            with gr.Accordion("Compare runs", open=False, elem_id="compare"):
                compare_handlers, compare_outputs = compare.build(ctx)
            with gr.Accordion("Checkpoint: download or upload", open=False):
                with gr.Row():
                    save_btn = gr.Button("Prepare download (.zip)")
                    checkpoint_file = gr.File(label="Checkpoint", interactive=False)
                gr.Markdown("The download holds the weights and, for models that still fit the upload cap, "
                            "the optimizer's state: uploaded again, **Train** continues exactly where it stopped.")
                checkpoint_upload = gr.File(label="Upload a checkpoint .zip to continue or inspect it",
                                            file_types=[".zip"], type="filepath")
    if set(form) != set(FORM_FIELDS):
        raise RuntimeError(f"the Train tab's components do not match TrainForm: {sorted(set(form) ^ set(FORM_FIELDS))}")
    shown.update(status=status, model_changed=ctx.model_changed, movie_note=movie_note, movie_plot=movie_plot,
                 head_scores=head_scores, **form)

    def by_name(fn: Callable) -> Callable:
        """`fn` returning {name: value} as a handler returning {component: value} (Gradio's form)."""
        @functools.wraps(fn)
        def handler(*args, **kwargs):
            return {shown[name]: value for name, value in fn(*args, **kwargs).items()}
        return handler

    inputs = [form[name] for name in FORM_FIELDS]
    live = [status, progress, shown["loss_plot"], sample, attention_plot, ctx.model_changed, movie_note, head_scores]
    cheap = dict(**ctx.cheap(), show_progress="hidden")
    preset_outputs = [shown["preset_info"]] + [form[name] for name in FORM_FIELDS if name != "preset"]
    # .input, not .change: a preset set by the page's link must not overwrite the link's own fields.
    form["preset"].input(by_name(handlers.apply_preset), form["preset"], preset_outputs, api_name="preset", **cheap)
    form["corpus"].change(_show_corpus_inputs, form["corpus"], [form["text"], form["upload"]],
                          api_visibility="private", **cheap)
    form["corpus"].change(handlers.describe_setup, [form["preset"], form["corpus"]], shown["preset_info"],
                          api_visibility="private", **cheap)
    view = gr.State(share.View())  # the groups the page's link hid and locked
    for field, fixed_by_stage in (("n_head", _heads_for_stage), ("n_layer", _layers_for_stage)):
        form["stage"].change(share.keeping_locks(fixed_by_stage, field), [form["stage"], view], form[field],
                             api_visibility="private", **cheap)
    previewed = [form[name] for name in ("corpus", "tokenizer", "stage", *MODEL_FIELDS, "upload")]
    # The live count and whether Train continues; also after training and Stop (the model changed).
    gr.on([c.change for c in previewed] + [form["text"].blur, ctx.demo.load, ctx.model_changed.change],
          handlers.preview, inputs, [params, next_step], api_name="preview", api_visibility="private", **cheap)
    training = dict(**ctx.heavy("train"))  # both buttons share one concurrency id: one limit for all trainings
    quiet = dict(**cheap, api_visibility="private")
    for trained in (train_btn.click(handlers.train, inputs, live, api_name="train", **training),
                    new_btn.click(handlers.train_new, inputs, live, api_name="train_new", **training)):
        trained.then(handlers.movie_after_run, None, movie_step, **quiet)  # the replay shows the last snapshot
        trained.then(compare_handlers.refresh, None, compare_outputs, **quiet)  # the run is kept
    movie_note.change(handlers.movie_range, None, movie_step, **quiet)  # a new snapshot: the slider reaches it
    movie_step.change(handlers.replay, movie_step, movie_plot, api_name="attention_movie_frame",
                      trigger_mode="always_last", **cheap)
    gr.api(handlers.attention_movie, api_name="attention_movie", **ctx.cheap())
    play_btn.click(handlers.play, [playing, movie_step], [playing, ticks, play_btn, movie_step], **quiet)
    ticks.tick(handlers.advance, movie_step, [movie_step, playing, ticks, play_btn], **quiet)
    stop_btn.click(handlers.stop, None, status, api_name="stop", **cheap)
    # One checkpoint at a time on the whole server: each briefly holds a model's bytes twice.
    one_at_a_time = dict(**ctx.heavy("checkpoint"), show_progress="minimal")
    save_btn.click(handlers.save_checkpoint, None, checkpoint_file, api_name="save_checkpoint", **one_at_a_time)
    gif_btn.click(handlers.movie_gif, None, gif_file, api_name="attention_movie_gif", **one_at_a_time).success(
        _shown, None, gif_file, **quiet)  # the file box appears once there is a file
    loaded_outputs = [shown[name] for name in ("status", "loss_plot", "model_changed", "movie_note", "movie_plot",
                                                "head_scores", "tokenizer", "stage", *MODEL_FIELDS)]
    checkpoint_upload.upload(by_name(handlers.load_checkpoint), checkpoint_upload, loaded_outputs,
                             api_name="load_checkpoint", **one_at_a_time)
    share.wire(ctx, handlers, form, groups, view=view, note_box=link_note, preset_info=shown["preset_info"],
               button=share_btn, link_box=share_link,
               writers=[(form["preset"], preset_outputs), (checkpoint_upload, loaded_outputs)])
    return handlers
