"""GPT-2 in the app: the Model picker of Generate and Attention, one shared copy of the weights and a
module of its own for each session, the offline message. Offline: the GPT-2 is a tiny random one saved
with transformers into a temporary folder, and the Hub is only ever asked in offline mode.
"""

import pytest
import torch

import gradio as gr
from core.attention import attention_maps
from core.checkpoint import save_archive
from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import CharTokenizer
from playground.context import AppContext
from playground.model_picker import YOURS, ModelPicker
from playground.pretrained import CATALOGUE, SharedPretrained
from playground.sessions import SessionRegistry, TrainedModel
from playground.settings import Settings
from playground.tabs.attention import AttentionHandlers
from playground.tabs.generate import GenerateHandlers
from playground.tabs.train import TrainHandlers
from support.app import FORM, serve
from support.hostile import Hostile
from support.models import PRETRAINED_TEXT as TEXT, save_tiny_gpt2

GPT2 = "gpt2"  # the picker's value for GPT-2 (CATALOGUE's key)


def make_ctx(weights: str) -> AppContext:
    with gr.Blocks():
        return AppContext(settings=Settings(gpt2_weights=weights, max_new_tokens=50), registry=SessionRegistry(10**9, 3600.0),
                          model_changed=gr.Textbox(), tabs=gr.Tabs())


@pytest.fixture
def ctx(tiny_gpt2_folder):
    return make_ctx(tiny_gpt2_folder)


def generated(ctx, session: str, prompt: str = "Hello", n: int = 5) -> str:
    """The status of one /generate call (greedy)."""
    return list(GenerateHandlers(ctx).generate(prompt, n, 0.0, 0, 1.0, 1, request=session))[-1][2]


def test_gpt2_is_loaded_once_and_generate_and_attention_read_it(ctx):
    picker = ModelPicker(ctx)
    choice, note, described = picker.use_model(GPT2, "alice")
    assert choice == GPT2 and "read-only" in note and "Train" in note
    assert described.startswith("GPT-2 (pretrained by OpenAI") and "2 layers x 4 heads, 32 channels, context 64" in described
    assert picker.follow("alice") == (GPT2, note)
    shared = ctx.pretrained[GPT2].get()
    session = ctx.registry.get("alice")
    assert session.trained is None and session.reading is session.pretrained and session.holds_model
    assert generated(ctx, "alice").startswith("5 tokens.")
    steps = session.last_steps
    assert session.last_text.startswith("Hello") and len(steps) == 5
    assert steps[0].text == shared.tokenizer.decode([steps[0].token_id])  # GPT-2's own tokens
    status, grid, *_ = AttentionHandlers(ctx).analysis.analyse(TEXT, "alice")
    assert "2 layer(s) x 4 head(s)" in status
    assert session.attention.ids == shared.tokenizer.encode(TEXT)
    assert ctx.pretrained[GPT2].get() is shared  # one copy: loaded once


def test_generation_caps_still_apply_to_gpt2(ctx):
    ModelPicker(ctx).use_model(GPT2, "alice")
    with pytest.raises(gr.Error, match="Max new tokens must be at most 50"):
        generated(ctx, "alice", n=51)
    status = generated(ctx, "alice", prompt="word " * 70)  # 70 tokens: the tiny GPT-2's context is 64
    assert "this model's context is 64 tokens" in status


def test_each_session_gets_its_own_module_over_the_same_weights(ctx):
    picker = ModelPicker(ctx)
    picker.use_model(GPT2, "alice")
    picker.use_model(GPT2, "bob")
    alice, bob = (ctx.registry.get(name).reading.model for name in ("alice", "bob"))
    assert alice is not bob and alice is not ctx.pretrained[GPT2].get().model
    assert alice.token_embedding.weight.data_ptr() == bob.token_embedding.weight.data_ptr()
    assert alice.blocks[1].mlp.fc.weight.data_ptr() == ctx.pretrained[GPT2].get().model.blocks[1].mlp.fc.weight.data_ptr()


def test_one_sessions_hooks_do_not_touch_anothers_analysis(ctx):
    picker, attention = ModelPicker(ctx), AttentionHandlers(ctx)
    picker.use_model(GPT2, "alice")
    picker.use_model(GPT2, "bob")
    alice = ctx.registry.get("alice").reading.model
    calls = []

    def flatten(_module, _inputs, pattern):  # alice's experiment: every head of layer 0 looks nowhere in particular
        calls.append(1)
        return torch.ones_like(pattern) / pattern.size(-1)

    handle = alice.blocks[0].attn.hook_pattern.register_forward_hook(flatten)
    try:
        attention.analysis.analyse(TEXT, "bob")
    finally:
        handle.remove()
    assert not calls
    bob = ctx.registry.get("bob").attention
    expected = attention_maps(ctx.pretrained[GPT2].get().model, bob.ids)
    torch.testing.assert_close(bob.weights(), expected, atol=1e-3, rtol=0)  # kept as float16
    # and alice's knock-out (hooks on her module) leaves bob's tools alone
    attention.analysis.analyse(TEXT, "alice")
    attention.knockouts.knock_out(["L0 H0", "L1 H2"], "zero", "alice")
    note, *_ = attention.knockouts.knock_out([], "zero", "bob")
    assert "No head picked" in note


def test_your_model_without_one_gives_the_usual_message(ctx):
    picker = ModelPicker(ctx)
    picker.use_model(GPT2, "alice")
    assert picker.use_model(YOURS, "alice") == (YOURS, "", "")
    assert ctx.registry.get("alice").pretrained is None
    assert "There is no model yet" in generated(ctx, "alice")
    with pytest.raises(gr.Error, match="no model yet"):
        AttentionHandlers(ctx).analysis.analyse(TEXT, "alice")


def test_an_analysis_of_gpt2_is_stale_once_the_session_reads_its_own_model(ctx):
    picker, attention = ModelPicker(ctx), AttentionHandlers(ctx)
    session = ctx.registry.get("alice")
    tokenizer = CharTokenizer("abc ")
    session.trained = TrainedModel(GPT(GPTConfig(vocab_size=4, block_size=8, n_layer=1, n_head=1, n_embd=8)),
                                   tokenizer, "a test corpus")
    picker.use_model(GPT2, "alice")
    attention.analysis.analyse(TEXT, "alice")
    attention.lens.lens(3, "alice")  # GPT-2's analysis, GPT-2 read: fine
    picker.use_model(YOURS, "alice")
    with pytest.raises(gr.Error, match="press Analyse again"):
        attention.lens.lens(3, "alice")


@pytest.mark.parametrize("bad", ["GPT2", "", None, 3, ["gpt2"], "gpt2 " * 1000])
def test_a_bad_choice_is_refused_naming_the_field(ctx, bad):
    with pytest.raises(gr.Error, match="Model must be one of yours, gpt2, smollm2; got"):
        ModelPicker(ctx).use_model(bad, "alice")
    assert ctx.registry.get("alice").pretrained is None


def test_training_and_loading_a_checkpoint_go_back_to_your_model(ctx, tmp_path):
    picker, train = ModelPicker(ctx), TrainHandlers(ctx)
    picker.use_model(GPT2, "alice")
    updates = list(train.run.train(**{**FORM, "steps": 5}, request="alice"))
    session = ctx.registry.get("alice")
    assert session.pretrained is None and session.reading is session.trained
    assert "trained 5 steps" in updates[-1][5]  # model_changed: the pickers follow your model again
    assert picker.follow("alice") == (YOURS, "")
    picker.use_model(GPT2, "alice")
    path = save_archive(tmp_path / "tiny.zip", GPT(GPTConfig(vocab_size=2, block_size=4, n_layer=1, n_head=1, n_embd=8)),
                        CharTokenizer("01"))
    train.checkpoints.load_checkpoint(str(path), "alice")
    assert session.pretrained is None and session.reading is session.trained


def test_unavailable_weights_say_how_to_use_a_local_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    for weights in ("gpt2", str(tmp_path / "no-such-folder")):
        ctx = make_ctx(weights)
        warnings = []
        monkeypatch.setattr(gr, "Warning", warnings.append)
        choice, note, changed = ModelPicker(ctx).use_model(GPT2, "alice")
        # nothing changed: the picker shows what is read, and model_changed stays (its followers would wipe the note)
        assert choice == YOURS and changed == gr.skip()
        learner, operator = note.split("\n\n")  # what the learner can do; apart, how the operator provides it
        assert "not available on this server" in learner and "still read your own model" in learner
        assert "**Train** tab" in learner and "PLAYGROUND" not in learner
        assert operator.startswith("*For whoever runs this server:*")
        assert "PLAYGROUND_GPT2_WEIGHTS=/path/to/folder" in operator
        assert "config.json" in operator and "model.safetensors" in operator
        assert warnings and "not available on this server" in warnings[0] and "PLAYGROUND" not in warnings[0]
        assert ctx.registry.get("alice").pretrained is None


def test_a_failed_load_is_not_retried_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    now = [0.0]
    shared = SharedPretrained(CATALOGUE[GPT2], str(tmp_path / "gpt2"), clock=lambda: now[0])
    with pytest.raises(gr.Error, match="not available on this server"):
        shared.get()
    save_tiny_gpt2(tmp_path / "gpt2")
    with pytest.raises(gr.Error, match="not available on this server"):
        shared.get()  # remembered
    now[0] = 61.0
    assert shared.get().model.config.n_layer == 2


def test_the_settings_read_the_folder_from_the_environment():
    assert Settings.from_env({"PLAYGROUND_GPT2_WEIGHTS": "/models/gpt2"}).gpt2_weights == "/models/gpt2"
    assert Settings.from_env({}).gpt2_weights == "gpt2"


# ---------------------------------------------------------------- raw HTTP, as an attacker sends it


@pytest.fixture(scope="module")
def gpt2_app(tiny_gpt2_folder):
    with serve(Settings.from_env({}, gpt2_weights=tiny_gpt2_folder)) as (demo, url):
        yield demo, Hostile(url)


@pytest.mark.parametrize("bad", ["GPT-2", 1e9, None, {"a": 1}, ["gpt2"], "x" * 100_000])
def test_use_model_answers_junk_with_the_fields_name(gpt2_app, bad):
    _, app = gpt2_app
    assert "Model must be one of yours, gpt2" in app.error("use_model", [bad], "junk-session")


def test_two_sessions_reading_gpt2_keep_their_own_analyses(gpt2_app):
    demo, app = gpt2_app
    for key, text in (("reader-a", "one two three four five six"), ("reader-b", TEXT)):
        choice, note, described = app.ok("use_model", ["gpt2"], key)
        assert choice == "gpt2" and "read-only" in note and described.startswith("GPT-2")
        status = app.ok("attention", [text], key)[0]
        assert "2 layer(s) x 4 head(s)" in status
    a, b = (demo.registry.peek(key) for key in ("reader-a", "reader-b"))
    assert a.reading.model is not b.reading.model
    assert len(a.attention.ids) == 6 and len(b.attention.ids) == len(b.reading.tokenizer.encode(TEXT))
    assert app.ok("use_model", ["yours"], "reader-a")[0] == "yours"
    assert b.pretrained is not None  # a's choice is a's


# ---------------------------------------------------------------- SmolLM2 (a Llama-family model) beside GPT-2


@pytest.fixture
def both(tiny_gpt2_folder, tiny_llama_folder):
    with gr.Blocks():
        return AppContext(settings=Settings(gpt2_weights=tiny_gpt2_folder, smollm2_weights=tiny_llama_folder,
                                            max_new_tokens=50),
                          registry=SessionRegistry(10**9, 3600.0), model_changed=gr.Textbox(), tabs=gr.Tabs())


def test_every_pretrained_model_has_its_own_setting():
    for key, kind in CATALOGUE.items():
        assert getattr(Settings(), kind.setting) == kind.repo
        assert getattr(Settings.from_env({f"PLAYGROUND_{key.upper()}_WEIGHTS": "/models/x"}), kind.setting) == "/models/x"


def test_the_picker_switches_between_yours_gpt2_and_smollm2(both):
    picker, attention = ModelPicker(both), AttentionHandlers(both)
    choice, note, described = picker.use_model("smollm2", "alice")
    assert choice == "smollm2" and "SmolLM2-135M is read-only" in note
    assert described.startswith("SmolLM2-135M (pretrained by Hugging Face") and "4 heads sharing 2 key/value heads" in described
    session = both.registry.get("alice")
    assert session.reading.model.config.position == "rope" and picker.follow("alice") == ("smollm2", note)
    status, grid = attention.analysis.analyse("the quick brown fox jumps over the lazy dog", "alice")[:2]
    assert "9 tokens" in status and "2 layer(s) x 4 head(s)" in status
    # the heads that share a key/value head stand together, a gap between the groups; the hover names it
    starts = [grid.layout[f"xaxis{n}"].domain[0] for n in range(1, 5)]
    assert starts[2] - starts[1] > 1.3 * (starts[1] - starts[0])
    assert starts[3] - starts[2] == pytest.approx(starts[1] - starts[0])
    assert "(key/value head 1)" in grid.data[2].hovertemplate and "(key/value head 0)" in grid.data[1].hovertemplate
    assert "each 2 adjacent heads share one key/value head" in grid.layout.title.subtitle.text
    assert "tokens." in generated(both, "alice", "the quick brown")  # Generate reads it too
    assert picker.use_model(GPT2, "alice")[0] == GPT2 and session.reading.model.config.position == "learned"
    assert picker.use_model(YOURS, "alice") == (YOURS, "", "")
    assert both.pretrained["smollm2"].get() is both.pretrained["smollm2"].get()  # one copy


def test_smollm2_offline_says_so_at_once_and_how_to_provide_it(monkeypatch, tmp_path, tiny_gpt2_folder):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    ctx = make_ctx(tiny_gpt2_folder)  # SmolLM2 at its default: the Hub's repo id, which an offline server cannot reach
    monkeypatch.setattr(gr, "Warning", lambda message: None)
    picker = ModelPicker(ctx)
    assert picker.use_model(GPT2, "alice")[0] == GPT2
    started = time.monotonic()
    choice, note, changed = picker.use_model("smollm2", "alice")
    assert time.monotonic() - started < 5
    # GPT-2 is still read, and the picker says so
    assert choice == GPT2 and changed == gr.skip() and ctx.registry.get("alice").pretrained.source == GPT2
    assert "SmolLM2-135M's weights are not available on this server" in note and "still read GPT-2:" in note
    assert "PLAYGROUND_SMOLLM2_WEIGHTS=/path/to/folder" in note and "tokenizer.json" in note
