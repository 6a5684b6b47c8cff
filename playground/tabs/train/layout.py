"""The Train tab's layout: the form beside the live views, every event wired, and `TrainHandlers`,
which makes the tab's parts, each given what it depends on (tests call their handlers with a session id
string instead of a gr.Request).

The tab's parts, one module each, and what each is given:
- `form`: the form declared once (`TrainForm`) and the rules that read it (`FormRules`: the settings),
- `checkpoints`: download, upload, and the export for `transformers` (`CheckpointHandlers`: the rules and
  the session's download folder),
- `restore`: a browser's model kept in the store and brought back (`RestoreHandlers`: the rules and the
  checkpoints, whose upload a model coming back goes through),
- `run`: what Train will do, the training stream and its live views, Stop (`RunHandlers`: the rules and the
  restore's `keeper`, which saves a run's state as it goes),
- `replay`: the attention movie's replay, /attention_movie and its GIF (`ReplayHandlers`: the download folder),
- `compare`: Compare runs (its own section and handlers),
- `link`: the teacher's link (the page's address sets up the form, by the rules).

Public events: /train (streams; continues the session's model), /train_new (discards it first),
/stop, /preset, /save_checkpoint, /load_checkpoint, /export_transformers, /attention_movie,
/attention_movie_frame, /attention_movie_gif, /compare_runs, /carry_code, /take_code (and the UI-only preview: the parameter
count and what Train will do).
Nothing imports this module but the package's `__init__`: it is the top of the tab. Never imports
another tab.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import gradio as gr

from core.presets import PRESETS
from playground.context import AppContext
from playground.figures import note_figure
from playground.figures.training import loss_figure
from playground.live_plot import LivePlot
from playground.sessions import Session
from playground.tabs.train import compare, link, room
from playground.tabs.train.checkpoints import NO_MODEL_TO_EXPORT, CheckpointHandlers
from playground.tabs.train.form import (
    ACTIVATION_CHOICES, BREAK_IT, CORPUS_CHOICES, FORM_FIELDS, MODEL_FIELDS, MODERN, NORM_CHOICES, PASTE,
    POSITION_CHOICES, TOKENIZER_CHOICES, UPLOAD, FormRules, described_parts, heads_for_stage, layers_for_stage,
    position_switch_label, stage_choices,
)
from playground.tabs.train.replay import NO_MOVIE, NO_REPLAY, NO_SCORES, PLAY, PLAY_INTERVAL_S, ReplayHandlers
from playground.tabs.train.restore import CARRY_NOTE, KEPT_FIELDS, SEEN_KEY, SEEN_SECRET, STORAGE_KEY, RestoreHandlers
from playground.tabs.train.run import NO_ATTENTION_YET, RunHandlers, progress_html


class TrainHandlers:
    """The Train tab's parts, made in the order of their dependencies; the wiring and the tests call each
    part's handlers (`handlers.run.train`), where `request` is a gr.Request or, in tests, a session id."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.scratch = Path(tempfile.mkdtemp(prefix="attention-playground-"))  # checkpoints to download
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)
        self.rules = FormRules(ctx.settings)
        self.checkpoints = CheckpointHandlers(ctx, self.rules, folder=self.folder)
        self.restore = RestoreHandlers(ctx, self.rules, self.checkpoints)
        self.run = RunHandlers(ctx, self.rules, keeper=self.restore.keeper)
        self.replay = ReplayHandlers(ctx, folder=self.folder)

    def folder(self, session: Session) -> Path:
        """The session's download folder, named by the server's id for it (never the client's hash)."""
        return self.scratch / session.id

    def free(self, session: Session) -> None:
        shutil.rmtree(self.folder(session), ignore_errors=True)


def build(ctx: AppContext) -> TrainHandlers:
    s = ctx.settings
    handlers = TrainHandlers(ctx)
    ctx.registry.on_free(handlers.free)
    ctx.registry.keep_closed(handlers.restore.unstored)  # with no store, a closed tab's model waits for its reload
    if ctx.store is not None:  # an idle model may leave memory for the store and come back on its owner's next call
        ctx.registry.keep_aside(handlers.restore.set_aside, handlers.restore.bring_back)
    start = handlers.rules.default_form()
    form: dict[str, gr.Component] = {}  # TrainForm's fields, by name
    shown: dict[str, gr.Component] = {}  # what handlers set by name besides the form
    groups: dict[str, gr.Accordion] = {}  # the form's accordions, by link.GROUPS' names: a link may hide them

    room_banner = room.banner()  # a teacher's push is news: above everything
    # The buttons come first: on a phone the columns stack, and Train must not sit screens below.
    with gr.Row(elem_id="train-buttons"):
        train_btn = gr.Button("Train", variant="primary", elem_id="train-button")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-button")
        new_btn = gr.Button("New model", elem_id="new-model-button")
    next_step = gr.Markdown(elem_id="train-next")  # what Train will do: continue, or start a new model
    status = gr.Markdown("Press **Train**: the default task trains in seconds.", elem_id="train-status")
    progress = gr.HTML(progress_html(None), elem_id="train-progress")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=300, elem_id="train-settings"):
            form["preset"] = gr.Dropdown([(p.title, p.name) for p in PRESETS.values()], value=start.preset,
                                         label="Preset", info="A recipe for everything below; change any field after.")
            shown["preset_info"] = gr.Markdown(handlers.rules.describe_setup(start.preset, start.corpus),
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
                form["stage"] = gr.Dropdown(stage_choices(start.norm), value=start.stage, elem_id="stage-dropdown",
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
                    label = position_switch_label(start.position) if name == "use_position_embedding" else label
                    form[name] = gr.Checkbox(getattr(start, name), label=label, info=info, elem_id=f"switch-{name}")
                params = gr.Markdown(elem_id="param-count")
                if not s.caps_lifted:
                    gr.Markdown(
                        f"This server's caps: {s.max_layers} layers, {s.max_heads} heads, {s.max_embd} channels, "
                        f"context {s.max_block_size}, {s.max_params:,} parameters, {s.max_iters:,} steps. "
                        "On your own machine, `python -m playground --no-caps` lifts them.",
                        elem_classes="caps-note",
                    )
            with gr.Accordion("Modern parts (Llama and its family)", open=False, elem_id="modern-parts") as groups["modern"]:
                gr.Markdown("Today's models (Llama, Mistral, Qwen, SmolLM) build a block from other parts. Each "
                            "says what to look for in the attention maps; the parameter count above follows.",
                            elem_classes="caps-note")
                with gr.Row():
                    form["position"] = gr.Dropdown(POSITION_CHOICES, value=start.position, label=MODERN["position"][0],
                                                   info=MODERN["position"][1], elem_id="modern-position")
                    form["norm"] = gr.Radio(NORM_CHOICES, value=start.norm, label=MODERN["norm"][0],
                                            info=MODERN["norm"][1], elem_id="modern-norm")
                form["activation"] = gr.Dropdown(ACTIVATION_CHOICES, value=start.activation,
                                                 label=MODERN["activation"][0], info=MODERN["activation"][1],
                                                 elem_id="modern-activation")
                with gr.Row():
                    form["n_kv_head"] = gr.Number(value=start.n_kv_head, precision=0, minimum=0, maximum=s.max_heads,
                                                  label=MODERN["n_kv_head"][0], info=MODERN["n_kv_head"][1],
                                                  elem_id="modern-kv-heads")
                    form["window"] = gr.Number(value=start.window, precision=0, minimum=0, maximum=s.max_block_size,
                                               label=MODERN["window"][0], info=MODERN["window"][1],
                                               elem_id="modern-window")
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
                shown["loss_plot"] = LivePlot(loss_figure([]), label="Loss", elem_id="loss-plot", min_width=280)
                attention_plot = LivePlot(note_figure(NO_ATTENTION_YET), label="Attention on a probe prompt",
                                          elem_id="live-attention", min_width=280)
            # Under the chart, each head's scores over training; under the live map, its replay.
            with gr.Row(equal_height=False):
                head_scores = LivePlot(note_figure(NO_SCORES), label="Head scores over training",
                                       elem_id="head-scores", min_width=280)
                with gr.Column(min_width=280, elem_id="movie"):
                    with gr.Row(equal_height=False):
                        movie_step = gr.Slider(0, 1, value=0, step=1, label="Replay: training step",
                                               elem_id="movie-step", scale=4)
                        play_btn = gr.Button(PLAY, size="sm", elem_id="movie-play", scale=1, min_width=90)
                    playing, ticks = gr.State(False), gr.Timer(PLAY_INTERVAL_S, active=False)
                    movie_note = gr.Markdown(NO_MOVIE, elem_id="movie-note")
                    movie_plot = LivePlot(note_figure(NO_REPLAY), label="Replay", elem_id="movie-frame")
                    gif_btn = gr.Button("Download the movie (GIF)", size="sm", elem_id="movie-gif-button")
                    # under the button, the column's whole width: beside it, the file's name shrank to ".g"
                    gif_file = gr.File(label="Attention movie (GIF)", interactive=False, elem_id="movie-gif",
                                       visible=False)
            sample = gr.Textbox(label="Live sample (the model writing, refreshed as it learns)", lines=4,
                                interactive=False, elem_id="live-sample", elem_classes="mono")
            with gr.Accordion("Compare runs", open=False, elem_id="compare") as compare_box:
                compare_handlers, compare_outputs = compare.build(ctx)
            with gr.Accordion("Checkpoint: download or upload", open=False):
                with gr.Row():
                    save_btn = gr.Button("Prepare download (.zip)")
                    checkpoint_file = gr.File(label="Checkpoint", interactive=False)
                gr.Markdown("The download holds the weights and, for models that still fit the upload cap, "
                            "the optimizer's state: uploaded again, **Train** continues exactly where it stopped.")
                # whether the model exports, said over the button before a click (disabled where it cannot)
                export_note = gr.Markdown(NO_MODEL_TO_EXPORT, elem_id="export-note")
                with gr.Row():
                    export_btn = gr.Button("Export for transformers (.zip)", interactive=False, elem_id="export-button")
                    export_file = gr.File(label="transformers model", interactive=False)
                gr.Markdown("The export is a folder that Hugging Face `transformers` loads as a GPT-2 or a Llama "
                            "(`AutoModelForCausalLM`, `AutoTokenizer`) with the same outputs, and a model card with "
                            "the loss curve, ready for the Hub. Options it cannot express are named instead.")
                checkpoint_upload = gr.File(label="Upload a checkpoint .zip to continue or inspect it",
                                            file_types=[".zip"], type="filepath")
            with gr.Accordion("Continue in another browser", open=False, elem_id="carry"):
                if ctx.store is None:
                    gr.Markdown("This server keeps models in memory only: download a checkpoint above and upload it "
                                "there instead.", elem_classes="caps-note")
                else:
                    gr.Markdown("Another laptop, or this server at another address, cannot read this browser's "
                                "storage: a code carries your model there.", elem_classes="caps-note")
                with gr.Row(equal_height=False):
                    carry_btn = gr.Button("Make a code", size="sm", elem_id="carry-make", interactive=ctx.store is not None)
                    carry_code = gr.Textbox(label="Your code", info=CARRY_NOTE, buttons=["copy"],
                                            interactive=False, visible=False, elem_id="carry-code", elem_classes="mono")
                with gr.Row(equal_height=False):
                    shown["carry_box"] = gr.Textbox(label="Have a code? Paste it here", max_length=64,
                                                    placeholder="XXXX-XXXX-XXXX-XXXX", elem_id="carry-input",
                                                    info="Takes the model it names: this tab's own model is replaced "
                                                         "(download it first to keep it).", scale=3)
                    take_btn = gr.Button("Take the model", size="sm", elem_id="carry-take", scale=1,
                                         interactive=ctx.store is not None)
    if set(form) != set(FORM_FIELDS):
        raise RuntimeError(f"the Train tab's components do not match TrainForm: {sorted(set(form) ^ set(FORM_FIELDS))}")
    shown.update(status=status, progress=progress, sample=sample, model_changed=ctx.model_changed,
                 movie_note=movie_note, movie_plot=movie_plot, head_scores=head_scores, movie_step=movie_step,
                 attention=attention_plot, **form)

    def by_name(fn: Callable) -> Callable:
        """`fn` returning {name: value} as a handler returning {component: value} (Gradio's form)."""
        @functools.wraps(fn)
        def handler(*args, **kwargs):
            return {shown[name]: value for name, value in fn(*args, **kwargs).items()}
        return handler

    inputs = [form[name] for name in FORM_FIELDS]
    live = [status, progress, shown["loss_plot"], sample, attention_plot, ctx.model_changed, movie_note, head_scores,
            next_step]
    cheap = dict(**ctx.cheap(), show_progress="hidden")
    preset_outputs = [shown["preset_info"]] + [form[name] for name in FORM_FIELDS if name != "preset"]
    # .input, not .change: a preset set by the page's link must not overwrite the link's own fields.
    form["preset"].input(by_name(handlers.rules.apply_preset), form["preset"], preset_outputs, api_name="preset", **cheap)
    # The preview below follows these fields too: these run once per change ("multiple"), never deferred, since two
    # deferred listeners of one change keep re-sending it to each other (see AppContext.wire_followers).
    beside_preview = dict(**cheap, api_visibility="private", trigger_mode="multiple")
    form["corpus"].change(_show_corpus_inputs, form["corpus"], [form["text"], form["upload"]], **beside_preview)
    form["corpus"].change(handlers.rules.describe_setup, [form["preset"], form["corpus"]], shown["preset_info"],
                          **beside_preview)
    # The stage and the position switch name the parts the model is built with (RMSNorm, RoPE).
    gr.on([form["norm"].change, form["position"].change], described_parts, [form["norm"], form["position"]],
          [form["stage"], form["use_position_embedding"]], **beside_preview)
    view = gr.State(link.View())  # the groups the page's link hid and locked
    for field, fixed_by_stage in (("n_head", heads_for_stage), ("n_layer", layers_for_stage)):
        form["stage"].change(link.keeping_locks(fixed_by_stage, field), [form["stage"], view], form[field],
                             **beside_preview)
    # (the steps too: "already trained 120 of 120 steps" must go once Steps is raised)
    previewed = [form[name] for name in ("corpus", "tokenizer", "stage", *MODEL_FIELDS, "upload", "steps")]
    # The live count and whether Train continues. A run says the latter itself, with its status, and once more as it
    # ends (below: a preview asked before the run began can land late on a busy server); an upload and a model coming
    # back ask after them. (Not a follower of the model: one that ran while the run trained landed after "Done" on a
    # busy server, saying "Training now" until the next one.)
    gr.on([c.change for c in previewed] + [form["text"].blur, ctx.demo.load],
          handlers.run.preview, inputs, [params, next_step], api_name="preview", api_visibility="private", **cheap)
    training = dict(**ctx.heavy("train"))  # both buttons share one concurrency id: one limit for all trainings
    quiet = dict(**cheap, api_visibility="private")
    for trained in (train_btn.click(handlers.run.train, inputs, live, api_name="train", **training),
                    new_btn.click(handlers.run.train_new, inputs, live, api_name="train_new", **training)):
        trained.then(handlers.replay.movie_after_run, None, movie_step, **quiet)  # the replay shows the last snapshot
        trained.then(handlers.run.preview, inputs, [params, next_step], **quiet)
        trained.then(compare_handlers.refresh, None, compare_outputs, **quiet)  # the run is kept
    # opened, it shows the runs kept now (a teacher may have put a room's runs there from the Room tab)
    compare_box.expand(compare_handlers.refresh, None, compare_outputs, **quiet)
    movie_note.change(handlers.replay.movie_range, None, movie_step, **quiet)  # a new snapshot: the slider reaches it
    movie_step.change(handlers.replay.replay, movie_step, movie_plot, api_name="attention_movie_frame",
                      trigger_mode="always_last", **cheap)
    gr.api(handlers.replay.attention_movie, api_name="attention_movie", **ctx.cheap())
    play_btn.click(handlers.replay.play, [playing, movie_step], [playing, ticks, play_btn, movie_step], **quiet)
    ticks.tick(handlers.replay.advance, movie_step, [movie_step, playing, ticks, play_btn], **quiet)
    stop_btn.click(handlers.run.stop, None, status, api_name="stop", **cheap)
    # One checkpoint at a time on the whole server: each briefly holds a model's bytes twice.
    one_at_a_time = dict(**ctx.heavy("checkpoint"), show_progress="minimal")
    save_btn.click(handlers.checkpoints.save_checkpoint, None, checkpoint_file, api_name="save_checkpoint", **one_at_a_time)
    ctx.follow_model(handlers.checkpoints.export_note, [], [export_note, export_btn])
    export_btn.click(handlers.checkpoints.export_transformers, None, export_file, api_name="export_transformers", **one_at_a_time)
    gif_btn.click(handlers.replay.movie_gif, None, gif_file, api_name="attention_movie_gif", **one_at_a_time).success(
        _shown, None, gif_file, **quiet)  # the file box appears once there is a file
    loaded_outputs = [shown[name] for name in ("status", "progress", "loss_plot", "model_changed", "movie_note",
                                                "movie_plot", "head_scores", "tokenizer", "stage", *MODEL_FIELDS)]
    checkpoint_upload.upload(by_name(handlers.checkpoints.load_checkpoint), checkpoint_upload, loaded_outputs,
                             api_name="load_checkpoint", **one_at_a_time).then(
        handlers.run.preview, inputs, [params, next_step], **quiet)
    setter = link.FormSetter(handlers.rules, form, groups, view=view, note_box=link_note,
                             preset_info=shown["preset_info"],
                             writers=[(form["preset"], preset_outputs), (checkpoint_upload, loaded_outputs)])
    opened = link.wire(ctx, setter, button=share_btn, link_box=share_link)
    # Coming back: after the link has set up the form, a model kept for this browser replaces it.
    shown["token"] = gr.BrowserState(None, storage_key=STORAGE_KEY,
                                     secret=ctx.store.secret() if ctx.store is not None else None)
    shown["seen"] = gr.BrowserState(False, storage_key=SEEN_KEY, secret=SEEN_SECRET)
    restored = [shown[name] for name in ("token", "seen", "status", "progress", "loss_plot", "sample", "model_changed",
                                         "movie_note", "movie_plot", "head_scores", "movie_step", "attention",
                                         *KEPT_FIELDS)]
    # ... then what Train will do is said again, with the form as it now is
    came_back = opened.then(by_name(handlers.restore.come_back), [shown["token"], shown["seen"]], restored,
                            api_name="come_back", **quiet).then(
        handlers.run.preview, inputs, [params, next_step], **quiet).then(
        compare_handlers.refresh, None, compare_outputs, **quiet)  # the runs kept with the model
    room.wire(ctx, room_banner, setter, handlers.rules, came_back)  # a room's link: its lesson has the last word
    # A code from another browser brings its model as coming back does, and this browser keeps its token.
    carry_btn.click(handlers.restore.carry_code, None, carry_code, api_name="carry_code", **one_at_a_time).success(
        _shown, None, carry_code, **quiet)
    take_btn.click(by_name(handlers.restore.take_code), shown["carry_box"], restored + [shown["carry_box"]],
                   api_name="take_code", **one_at_a_time).success(
        handlers.run.preview, inputs, [params, next_step], **quiet).then(
        compare_handlers.refresh, None, compare_outputs, **quiet)
    return handlers


def _show_corpus_inputs(corpus: str) -> tuple:
    """The paste box and the file picker, each shown only for its corpus choice."""
    return gr.update(visible=corpus == PASTE), gr.update(visible=corpus == UPLOAD)


def _shown() -> dict:
    return gr.update(visible=True)
