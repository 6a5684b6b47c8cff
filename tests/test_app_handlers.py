"""The Train and Generate tabs' handlers called as plain functions (a session id stands in for
gr.Request), plus the app's wiring: every event has its API name and concurrency on purpose."""

import dataclasses
import inspect
import re
import subprocess
import sys
import zipfile

import gradio as gr
import pytest
import torch

from core.data import CORPORA
from core.observers import Samples
from core.presets import PRESETS
from playground.app import build_app, launch_kwargs
from playground.context import AppContext
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.tabs.generate import COLOR_MAP, GenerateHandlers
from playground.tabs.train import TrainHandlers
from playground.tabs.train.form import FORM_FIELDS, FormRules, TrainForm
from playground.tabs.train.link import preset_values
from support.app import FORM, REPO, plotted
from support.handlers import SETTINGS, make_ctx, run_train


@pytest.fixture
def gen(ctx):
    return GenerateHandlers(ctx)


@pytest.fixture(scope="module")
def trained():
    """(ctx, train handlers, generate handlers) with session "a" trained for 20 steps, shared by the
    tests that only read it (or check that a bad call left it as it was)."""
    ctx = make_ctx()
    train = TrainHandlers(ctx)
    run_train(train)
    return ctx, train, GenerateHandlers(ctx)


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------- training


def test_train_streams_live_updates_and_keeps_the_model(train, ctx):
    updates = run_train(train)
    status, progress, loss_fig, sample, attention, changed, movie_note, head_scores, next_step = updates[-1]
    assert len(updates) >= 2
    # what Train will do comes with the status: "Training now" while it trains, the next step with "Done"
    assert {update[-1] for update in updates[:-1]} == {"Training now: **Stop** ends it and keeps what it has learned."}
    assert "already trained 20 of 20 steps" in next_step
    assert next_step == train.run.preview(**FORM, request="a")[1]  # as the preview says it, once the run is over
    assert status.startswith("Done: 20 steps")
    assert "step 20 / 20" in progress and "tokens/s" in progress
    train_line, val_line, answer_line = plotted(loss_fig).data
    assert list(train_line.x) == list(range(1, 21)) and list(val_line.x) == [10, 20]
    assert list(answer_line.x) == [10, 20] and answer_line.name == "answers (val)"  # the copy task's answers
    assert "Answers (the half of each line that can be learned)" in progress and "% right" in progress
    session = ctx.registry.get("a")
    assert sample and sample == Samples(session.tokenizer).sample(session.trainer)  # the model's own text at step 20 (seeded)
    assert len(plotted(attention).data) == 1 * 2  # one heatmap per layer x head
    assert "A 1-layer model with 2 heads" in changed and "20 steps" in changed
    session = ctx.registry.get("a")
    assert session.model is not None and session.trainer.step == 20 and len(session.trained.history) == 20


def test_train_again_continues_and_says_when_the_target_is_reached(train, ctx):
    run_train(train)
    model = ctx.registry.get("a").model
    (status, *others), = run_train(train)  # one update: what to do, and nothing else changes
    assert "already trained 20 of 20 steps" in status and "New model" in status
    assert others[2] is gr.skip() or others[2] == gr.skip()  # the live sample is left as it was
    updates = run_train(train, steps=30)
    assert updates[0][0] == "Continuing from step 20."
    session = ctx.registry.get("a")
    assert session.model is model and session.trainer.step == 30
    assert [row["step"] for row in session.trained.history] == list(range(1, 31))


def test_changed_settings_say_what_differs_and_keep_the_model(train, ctx):
    run_train(train)
    before = weights(ctx.registry.get("a").model)
    for change, shown in [(dict(n_layer=2), "n_layer 1 → 2"), (dict(stage="bigram"), "stage gpt → bigram"),
                          (dict(corpus="sort"), "vocabulary"), (dict(tokenizer="gpt2", n_embd=8), "tokenizer char → gpt2")]:
        (status, *_), = run_train(train, steps=40, **change)  # a status, never an error badge
        assert shown in status and "**New model**" in status
        if "tokenizer" not in change:  # (GPT-2's embedding is over this test's cap: the preview says that first)
            assert shown in train.run.preview(**{**FORM, "steps": 40, **change}, request="a")[1]  # said before Train too
    session = ctx.registry.get("a")
    assert same(before, weights(session.model)) and session.trainer.step == 20


def test_new_model_discards_the_model_and_trains_one_with_the_settings(train, ctx):
    run_train(train)
    updates = list(train.run.train_new(**{**FORM, "n_layer": 2, "steps": 5}, request="a"))
    assert updates[0][0] == "Training a new model." and updates[-1][0].startswith("Done: 5 steps")
    session = ctx.registry.get("a")
    assert session.model.config.n_layer == 2 and [row["step"] for row in session.trained.history] == list(range(1, 6))


def test_stop_keeps_the_weights_and_train_continues(train, ctx):
    stream = train.run.train(**{**FORM, "steps": 2000}, request="a")
    assert next(stream)[0] == "Training a new model."  # the first step's update
    next(stream)
    assert "already running training" in _error(lambda: run_train(train))  # a second Train click
    assert train.run.stop("a").startswith("Stopping")  # the stream is not being pulled, so it cannot end yet
    status = list(stream)[-1][0]
    session = ctx.registry.get("a")
    stopped_at = session.trainer.step
    assert status.startswith(f"Stopped at step {stopped_at}") and stopped_at < 2000
    assert train.run.stop("a") == gr.skip()  # nothing trains: the status stays as it is
    run_train(train, steps=stopped_at + 3)
    assert session.trainer.step == stopped_at + 3


def test_stop_while_the_stream_waits_is_not_lost(train, ctx):
    stream = train.run.train(**{**FORM, "corpus": "shakespeare", "preset": "shakespeare-char-cpu", "steps": 2000}, request="a")
    assert next(stream)[0] == "Training a new model."
    train.run.stop("a")  # while nobody pulls the stream
    assert list(stream)[-1][0].startswith("Stopped at step")


@pytest.mark.parametrize("change, message", [
    (dict(learning_rate=float("nan")), "Learning rate must be a finite number"),
    (dict(n_layer=4), "Layers must be at most 3.*--no-caps"),
    (dict(n_head=2.5), "Heads must be a whole number"),
    (dict(batch_size=0), "Batch size must be at least 1"),
    (dict(batch_size="lots"), "Batch size must be a number"),
    (dict(corpus="wikipedia"), "Corpus must be one of"),
    (dict(n_embd=18, n_head=4), "n_embd \\(18\\) must be divisible by n_head \\(4\\)"),
    (dict(corpus="paste", text="   "), "Your text is empty"),
    (dict(corpus="paste", text="abc" * 5), "must be longer than 16"),
    (dict(corpus="upload"), "Upload a .txt file first"),
])
def test_bad_training_input_is_a_clear_error_and_the_model_stays(trained, change, message):
    ctx, train, _ = trained
    session = ctx.registry.get("a")
    model, before = session.model, weights(session.model)
    with pytest.raises(gr.Error, match=message):
        run_train(train, steps=40, **change)
    assert session.model is model and same(before, weights(model)) and session.trainer.step == 20


@pytest.mark.parametrize("change, message", [
    (dict(tokenizer="gpt2", n_embd=8), "855,385 parameters; the limit is 200,000.*PLAYGROUND_MAX_PARAMS"),
    (dict(corpus="paste", text="abcdefgh|abcdefgh\n" * 3), "too short for a context of 16 tokens"),
])
def test_new_models_that_cannot_train_are_refused(trained, change, message):
    ctx, train, _ = trained
    with pytest.raises(gr.Error, match=message):
        run_train(train, "fresh", **change)
    assert ctx.registry.get("fresh").model is None


@pytest.mark.parametrize("content, message", [
    (b"\x00\x01\x02binary" * 100, "binary file"),
    ("café au lait ".encode("latin-1") * 100, "not UTF-8"),
])
def test_bad_uploads_are_refused(train, tmp_path, content, message):
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    with pytest.raises(gr.Error, match=message):
        run_train(train, corpus="upload", upload=str(path))


def test_uploaded_and_pasted_text_train(train, ctx, tmp_path):
    text = "the cat sat on the mat. " * 200
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    run_train(train, "up", corpus="upload", upload=str(path), steps=5)
    run_train(train, "paste", corpus="paste", text=text, steps=5)
    for session_id in ("up", "paste"):
        assert ctx.registry.get(session_id).tokenizer.vocab_size == len(set(text))


def test_preview_counts_parameters_and_says_whether_train_continues(trained):
    _, train, _ = trained
    count, next_step = train.run.preview(*FORM.values(), request="new")
    assert "parameters" in count and "vocabulary 28 tokens" in count and "LayerNorms" in count
    assert next_step == "**Train** starts a new model with these settings."
    assert "continues your model from step 20" in train.run.preview(**{**FORM, "steps": 30}, request="a")[1]
    assert "already trained 20 of 20 steps" in train.run.preview(*FORM.values(), request="a")[1]
    assert "Press **New model**" in train.run.preview(*{**FORM, "n_layer": 2}.values(), request="a")[1]
    assert "⚠️" in train.run.preview(*{**FORM, "n_layer": 99}.values(), request="a")[0]
    stream = train.run.train(**{**FORM, "steps": 2000}, request="trains")
    update = next(stream)  # while it trains, the note says so, not the step the run started from
    assert update[-1].startswith("Training now: **Stop**")
    # ... and a preview leaves the note to the run: asked as the run ends, it could land after the run's last word
    assert train.run.preview(**{**FORM, "steps": 2000}, request="trains")[1] == gr.skip()
    train.run.stop("trains")
    list(stream)
    assert "continues your model from step" in train.run.preview(**{**FORM, "steps": 2000}, request="trains")[1]


def test_the_parameter_count_adds_up_to_its_total(trained):
    _, train, _ = trained
    preview, _ = train.run.preview(**{**FORM, "stage": "feed_forward"}, request="new")
    total, parts = re.match(r"\*\*([\d,]+) parameters\*\* \((.*)\);", preview).groups()
    assert sum(int(n.replace(",", "")) for n in re.findall(r"([\d,]+)(?:,|$)", parts)) == int(total.replace(",", ""))


def test_the_form_is_declared_once(train):

    assert tuple(FORM) == FORM_FIELDS  # the API's keywords, in order
    for handler in (train.run.train, train.run.train_new, train.run.preview):
        assert list(inspect.signature(handler).parameters) == [*FORM_FIELDS, "request"]  # what Gradio reads


def test_presets_fill_the_form_within_the_caps(train):
    form = train.rules.apply_preset("shakespeare-char")
    assert (form["corpus"], form["tokenizer"], form["stage"]) == ("shakespeare", "char", "gpt")
    assert (form["n_layer"], form["n_embd"], form["block_size"]) == (3, 64, 32)
    assert "Reduced to this server's caps" in form["preset_info"] and "n_embd 384 → 64" in form["preset_info"]
    assert set(form) - {"preset_info"} <= set(FORM)
    with pytest.raises(gr.Error):
        train.rules.apply_preset("gpt-5")


@pytest.mark.parametrize("caps", ["public", "test"])
def test_every_preset_capped_to_a_server_is_a_form_that_trains(caps, train):
    rules = FormRules(Settings()) if caps == "public" else train.rules  # public: 256 channels for shakespeare-char's 6 heads
    for name in PRESETS:
        form = preset_values(rules, name)
        recipe = rules.recipe(TrainForm(**{**form, "text": form["text"] or ""}))
        recipe.configs(65)  # the model's own checks (channels split evenly among the heads, ...)


@pytest.mark.parametrize("threshold, device", [(10**6, "cpu"), (1, "auto")])
def test_a_small_model_trains_on_the_cpu_even_where_there_is_a_gpu(threshold, device):
    ctx = AppContext(settings=dataclasses.replace(SETTINGS, gpu_min_params=threshold),
                     registry=SessionRegistry(10**9, 600), model_changed=None, tabs=None)
    run_train(TrainHandlers(ctx))
    assert ctx.registry.get("a").trained.train_config.device == device  # "auto": the GPU where there is one


def test_the_same_seed_trains_the_same_model_in_any_session(train, ctx):
    for session in ("s1", "s2"):
        torch.manual_seed(hash(session) % 1000)  # whatever else drew from the global RNG meanwhile
        run_train(train, session)
    assert same(weights(ctx.registry.get("s1").model), weights(ctx.registry.get("s2").model))
    run_train(train, "s3", seed=2)
    assert not same(weights(ctx.registry.get("s1").model), weights(ctx.registry.get("s3").model))


# ---------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_into_another_session(trained):
    ctx, train, gen = trained
    path = train.checkpoints.save_checkpoint("a")
    assert path.endswith(".zip") and zipfile.is_zipfile(path)
    shown = train.checkpoints.load_checkpoint(path, "b")
    assert shown["status"].startswith("Loaded a 1-layer model with 2 heads") and "step 20" in shown["status"]
    assert [shown[k] for k in ("tokenizer", "stage", "n_layer", "n_head", "n_embd", "block_size")] == \
        ["char", "gpt", 1, 2, 16, 16]
    assert len(plotted(shown["loss_plot"]).data[0].x) == 20 and "20 steps" in shown["model_changed"]
    a, b = ctx.registry.get("a"), ctx.registry.get("b")
    assert same(weights(a.model), weights(b.model)) and a.model is not b.model
    texts = [list(gen.generate("abc", 20, 0.8, 0, 1.0, 7, request=s))[-1][1] for s in ("a", "b")]
    assert texts[0] == texts[1] and texts[0].startswith("\nabc")  # still the copy task's: its lines' start
    assert a.trained.task is b.trained.task is CORPORA["repeat"].task
    run_train(train, "b", steps=25)  # the loaded model trains on from its step
    assert ctx.registry.get("b").trainer.step == 25


def test_an_uploaded_checkpoint_trains_on_exactly_as_the_session_that_saved_it(train, ctx):
    run_train(train, "x")
    path = train.checkpoints.save_checkpoint("x")
    assert "trainer.safetensors" in zipfile.ZipFile(path).namelist()
    train.checkpoints.load_checkpoint(path, "y")
    for session in ("x", "y"):
        run_train(train, session, steps=25)
    x, y = ctx.registry.get("x"), ctx.registry.get("y")
    assert x.trainer.step == y.trainer.step == 25 and y.trained.resume_state is None
    assert same(weights(x.model), weights(y.model))  # the same AdamW moments and batches went on


def test_bad_checkpoints_are_refused_and_the_model_stays(trained, tmp_path):
    ctx, train, _ = trained
    model = ctx.registry.get("a").model
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(gr.Error, match="not a checkpoint folder or a valid .zip"):
        train.checkpoints.load_checkpoint(str(junk), "a")
    with pytest.raises(gr.Error, match="Choose a checkpoint"):
        train.checkpoints.load_checkpoint(None, "a")
    assert ctx.registry.get("a").model is model
    with pytest.raises(gr.Error, match="no model to save"):
        train.checkpoints.save_checkpoint("empty")


def test_checkpoints_over_the_caps_are_refused(ctx, tmp_path):
    from core.checkpoint import save_archive
    from core.config import GPTConfig
    from core.model import GPT
    from core.tokenizers import CharTokenizer

    path = save_archive(tmp_path / "big.zip", GPT(GPTConfig(vocab_size=2, n_layer=4, n_head=1, n_embd=8, block_size=4)),
                        CharTokenizer("01"))
    with pytest.raises(gr.Error, match="layers must be at most 3.*--no-caps"):
        TrainHandlers(ctx).checkpoints.load_checkpoint(str(path), "a")
    assert ctx.registry.get("a").model is None


# ---------------------------------------------------------------- generation


def test_generate_streams_tokens_with_probabilities(trained):
    ctx, _, gen = trained
    updates = list(gen.generate("abc", 30, 0.8, 5, 0.9, 3, False, request="a"))  # written on past a line end
    tokens, text, status = updates[-1]
    assert tokens[0] == ("↵\nabc", None) and len(tokens) == 31  # a copy-task prompt starts a line
    assert all(band in COLOR_MAP for _, band in tokens[1:])  # each token shaded by its probability band
    # the shaded tokens are the text, with a visible ↵ before each line break
    assert text == "".join(t for t, _ in tokens).replace("↵\n", "\n") and status.startswith("30 tokens")
    session = ctx.registry.get("a")
    assert session.last_text == text and len(session.last_steps) == 30
    fig, info = gen.inspect_token(3, "a")
    assert "Token 3" in info and len(fig.data[0].x) >= 5
    with pytest.raises(gr.Error, match="Token number must be at most 30"):
        gen.inspect_token(31, "a")


def test_generate_seed_repeats_and_sessions_draw_independently(trained):
    ctx, train, gen = trained
    run_train(train, "other")
    seeded = [list(gen.generate("ab", 25, 1.0, 0, 1.0, 11, request="a"))[-1][1] for _ in range(2)]
    assert seeded[0] == seeded[1]
    # Unseeded draws come from the session's own generator: b's activity does not change a's text.
    texts = []
    for others in (0, 3):
        ctx.registry.get("a").generator.manual_seed(5)
        for _ in range(others):
            list(gen.generate("ab", 25, 1.0, 0, 1.0, None, request="other"))
        texts.append(list(gen.generate("ab", 25, 1.0, 0, 1.0, -1, request="a"))[-1][1])
    assert texts[0] == texts[1]


def test_empty_prompt_starts_from_a_newline(trained):
    _, _, gen = trained
    tokens, text, _ = list(gen.generate("", 10, 0.0, 0, 1.0, None, False, request="a"))[-1]
    assert tokens[0] == ("↵\n", None) and len(tokens) == 11 and text.startswith("\n")


@pytest.mark.parametrize("args, message", [
    (("abc", 10, float("inf"), 0, 1.0, None), "Temperature must be a finite number"),
    (("abc", 101, 1.0, 0, 1.0, None), "Max new tokens must be at most 100.*--no-caps"),
    (("abc", 10, 1.0, -3, 1.0, None), "Top-k must be at least 1"),
    (("abc", 10, 1.0, 0, 0.0, None), "Top-p must be at least 0.01"),
    (("abc", 10, 1.0, 0, 1.0, 1.5), "Seed must be a whole number"),
    (("a" * 201, 10, 1.0, 0, 1.0, None), "Prompt has 201 characters; the limit is 200"),
])
def test_bad_generation_input_is_a_clear_error(trained, args, message):
    ctx, _, gen = trained
    with pytest.raises(gr.Error, match=message):
        list(gen.generate(*args, request="a"))
    assert not ctx.registry.get("a").busy


def test_generate_without_a_model_says_what_to_do(trained):
    _, _, gen = trained
    (tokens, text, status), = gen.generate("abc", 10, 1.0, 0, 1.0, None, request="nobody")  # a's model is not theirs
    assert "no model yet: train one" in status


# ---------------------------------------------------------------- the app


def test_every_event_has_an_api_name_and_a_concurrency_on_purpose():
    settings = Settings(max_trainings=7, generate_concurrency=3, step_workers="off")
    demo = build_app(settings)
    events = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}
    for name in ("train", "train_new", "stop", "preset", "save_checkpoint", "load_checkpoint",
                 "generate", "inspect_token", "attention", "baby_gpt_train"):
        assert name in events, name
    # every learner's training is admitted (they take turns step by step); both buttons share the limit
    assert (events["train"].concurrency_id, events["train"].concurrency_limit) == ("train", 7)
    assert (events["train_new"].concurrency_id, events["train_new"].concurrency_limit) == ("train", 7)
    assert (events["generate"].concurrency_id, events["generate"].concurrency_limit) == ("generate", 3)
    assert (events["stop"].concurrency_id, events["stop"].concurrency_limit) == ("cheap", None)
    assert demo._queue.max_size == settings.max_queue_size
    assert hasattr(demo, "registry")


def test_launch_defaults_are_secure():
    kwargs = launch_kwargs(Settings(max_upload_bytes=1234))
    assert kwargs["server_name"] == "127.0.0.1" and kwargs["share"] is False
    assert kwargs["enable_monitoring"] is False and kwargs["allowed_paths"] == []
    assert kwargs["show_error"] is False and kwargs["max_file_size"] == 1234
    # each admitted training holds a worker thread while it waits its turn; others must still get one
    settings = Settings(max_trainings=90)
    assert launch_kwargs(settings)["max_threads"] >= settings.train_concurrency + 20


def _error(fn) -> str:
    try:
        fn()
    except gr.Error as error:
        return str(error)
    return ""


def test_command_line_defaults_are_local_and_no_share():
    from playground.__main__ import parse_args

    args = parse_args([])
    assert (args.host, args.port, args.share, args.no_caps) == ("127.0.0.1", None, False, False)
    args = parse_args(["--host", "0.0.0.0", "--port", "8000", "--no-caps"])
    assert (args.host, args.port, args.no_caps) == ("0.0.0.0", 8000, True)


def test_the_command_line_answers_help_before_importing_torch_or_gradio():
    loaded = subprocess.run([sys.executable, "-c", "import sys, playground.__main__; "
                             "print(sorted({'torch', 'gradio'} & set(sys.modules)))"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
    helped = subprocess.run([sys.executable, "-m", "playground", "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert helped.returncode == 0 and "--no-caps" in helped.stdout


def test_the_preset_description_follows_the_corpus(train):
    assert train.rules.describe_setup("repeat", "repeat").startswith("Random 8-letter words")
    other = train.rules.describe_setup("repeat", "shakespeare")
    assert other.startswith("**Tiny Shakespeare** with the model and training settings of the *Copy task")
    assert "Random 8-letter" not in other
    assert "Your own text" in train.rules.describe_setup("repeat", "paste")


def test_the_heads_slider_follows_the_stage():
    from playground.tabs.train.form import heads_for_stage as _heads_for_stage

    assert _heads_for_stage("one_head")["value"] == 1 and _heads_for_stage("one_head")["interactive"] is False
    assert _heads_for_stage("bigram")["interactive"] is False and "value" not in _heads_for_stage("bigram")
    assert _heads_for_stage("multi_head")["interactive"] is True


def test_the_layers_slider_follows_the_stage(train):
    from playground.tabs.train.form import layers_for_stage as _layers_for_stage

    early = _layers_for_stage("feed_forward")
    assert early["interactive"] is False and "1 layer" in early["info"] and "value" not in early
    assert _layers_for_stage("gpt")["interactive"] is True
    # the stage's one layer wins over the slider's three: the preview counts one block
    one, _ = train.run.preview(**{**FORM, "stage": "feed_forward", "n_layer": 1}, request="layers")
    three, _ = train.run.preview(**{**FORM, "stage": "feed_forward", "n_layer": 3}, request="layers")
    assert one == three and one.startswith("**")


@pytest.mark.parametrize("meta, task", [({"preset": "sort"}, "sort"), ({"preset": "sort", "text_file": "my.txt"}, None),
                                        ({"corpus": "Reverse task"}, "reverse"), ({}, None)])
def test_an_uploaded_checkpoint_knows_its_task_from_the_app_or_the_command_line(ctx, tmp_path, meta, task):
    """The app saves the corpus's title, the command line its preset: either says which task's lines the
    model writes on the Generate tab."""
    from core.checkpoint import save_archive
    from core.model import GPT, GPTConfig
    from core.tokenizers import CharTokenizer

    path = save_archive(tmp_path / "task.zip", GPT(GPTConfig(vocab_size=12, block_size=8, n_layer=1, n_head=1,
                                                             n_embd=8)), CharTokenizer("\n0123456789="), meta)
    TrainHandlers(ctx).checkpoints.load_checkpoint(str(path), "a")
    assert ctx.registry.get("a").trained.task is (CORPORA[task].task if task else None)


def test_a_loaded_bigram_is_called_a_bigram(ctx, tmp_path):
    from core.checkpoint import save_archive
    from core.config import stage_config
    from core.model import GPT
    from core.tokenizers import CharTokenizer

    path = save_archive(tmp_path / "bigram.zip", GPT(stage_config("bigram", vocab_size=2, n_layer=2, block_size=4,
                                                                  n_embd=8)), CharTokenizer("01"))
    shown = TrainHandlers(ctx).checkpoints.load_checkpoint(str(path), "a")
    assert shown["status"].startswith("Loaded a bigram model (") and "layer" not in shown["status"]
    assert shown["model_changed"].startswith("A bigram model,") and shown["stage"] == "bigram"
