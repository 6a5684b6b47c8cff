"""Export to transformers: the folder loads as GPT2LMHeadModel, LlamaForCausalLM or MistralForCausalLM with
our logits and our tokenizer's ids, its model card renders, and the Hub upload goes as far as the network.

Nothing here touches the network: the Hub is a recorder, or huggingface_hub in offline mode.
"""

import ast
import contextlib
import io
import os
import re
import zipfile

import gradio as gr
import huggingface_hub
import pytest
import torch
import transformers
from PIL import Image

import core.export
from core.checkpoint import load, load_trainer_state, save
from core.config import GPTConfig
from core.data import corpus_text
from core.export import FILES, NotExpressible, push_to_hub, to_transformers
from core.model import GPT
from core.modelcard import CARD_FILE, CURVE_FILE, TRAIN_COLOR
from core.presets import PRESETS, preset_configs
from core.sample import generate
from core.tokenizers import CharTokenizer, GPT2Tokenizer
from playground.tabs.train.checkpoints import NO_MODEL_TO_EXPORT, exported_as_they_are
from support.app import REPO
from support.cli import TINY, call_cli
from support.handlers import make_ctx, run_train

TEXTS = ["The quick brown fox jumps over the lazy dog, and then", "In a hole in the ground there lived a hobbit."]
LLAMA = dict(position="rope", norm="rmsnorm", activation="swiglu", bias=False, qkv_bias=False, lm_head_bias=False)
CHARS = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz|\n ")
README = REPO / "README.md"


def random_gpt(vocab_size: int = CHARS.vocab_size, **options) -> GPT:
    """A seeded GPT whose every weight (biases and norms included) is drawn large: a wrong mapping cannot hide."""
    config = GPTConfig(vocab_size=vocab_size, block_size=16, n_layer=2, n_head=4, n_embd=32, **options)
    model = GPT(config, generator=torch.Generator().manual_seed(0)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm_weight = name.split(".")[-2].startswith("ln") and name.endswith(".weight")
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if norm_weight else 0.0))
    return model


def exported(model, tokenizer, folder, meta=None):
    """(the transformers model, its tokenizer) read back from `model` exported to `folder`."""
    to_transformers(model, tokenizer, meta or {}, folder)
    return (transformers.AutoModelForCausalLM.from_pretrained(folder).eval(),
            transformers.AutoTokenizer.from_pretrained(folder))


def assert_same_logits(ours: GPT, theirs, ids: torch.Tensor) -> float:
    with torch.no_grad():
        expected, got = ours(ids)[0], theirs(ids).logits
    assert expected.std() > 1  # large enough that a mapping mistake would show
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    return (got - expected).abs().max().item()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A character model trained 40 steps on the copy task from the command line, exported from there:
    (checkpoint folder, exported folder)."""
    folder = tmp_path_factory.mktemp("trained")
    checkpoint, out = folder / "copy", folder / "copy-hf"
    result = call_cli("train", "--preset", "repeat", "--max-iters", "40", "--eval-interval", "10", "--out",
                      str(checkpoint), *TINY, "--set", "lm_head_bias=false")  # GPT-2 has no bias on its LM head
    assert result.returncode == 0, result.stderr
    result = call_cli("export", str(checkpoint), "--to", "transformers", str(out))
    assert result.returncode == 0 and f"GPT2LMHeadModel written to {out}" in result.stderr, result.stderr
    return checkpoint, out


# ---------------------------------------------------------------- the same model in transformers


def test_a_trained_character_model_is_a_gpt2_with_our_logits_and_our_tokens(trained):
    checkpoint, out = trained
    model, tokenizer, _ = load(checkpoint)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf) is transformers.GPT2LMHeadModel and sorted(p.name for p in out.iterdir()) == sorted(FILES)
    text = corpus_text("repeat")[:200]
    ids = torch.tensor([tokenizer.encode(text[i: i + 16]) for i in (0, 50, 100)])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model(ids)[0], atol=1e-5, rtol=0)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tokenizer(text)["input_ids"] == tokenizer.encode(text)
    assert hf_tokenizer.decode(tokenizer.encode(text)) == text
    with pytest.raises(Exception, match="Missing \\[UNK\\]"):  # a character outside the vocabulary, as ours refuses
        hf_tokenizer("ABC")


@pytest.mark.parametrize("options", [
    dict(lm_head_bias=False),  # GPT-2's parts with biases, untied
    dict(bias=False, qkv_bias=False, lm_head_bias=False, tie_weights=True),  # nanoGPT's: biases written as zeros
    dict(bias=False, lm_head_bias=False, activation="relu", norm_eps=1e-6, mlp_hidden=40),  # a bias on q, k, v only
    dict(lm_head_bias=False, activation="gelu_tanh", scale_attention=False),  # GPT-2's scale_attn_weights=False
    dict(lm_head_bias=False, position="none"),  # a position table of zeros
], ids=["biases", "nanogpt", "qkv-bias-relu", "unscaled", "no-positions"])
def test_gpt2_style_models_load_as_gpt2_with_our_logits(options, tmp_path):
    model = random_gpt(**options)
    hf, _ = exported(model, CHARS, tmp_path)
    assert type(hf) is transformers.GPT2LMHeadModel
    assert_same_logits(model, hf, torch.randint(0, CHARS.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1)))


def test_a_gpt2_bpe_model_brings_gpt2s_own_tokenizer(tmp_path):
    tokenizer = GPT2Tokenizer()
    model = random_gpt(tokenizer.vocab_size, lm_head_bias=False, tie_weights=True, activation="gelu_tanh")
    hf, hf_tokenizer = exported(model, tokenizer, tmp_path)
    assert type(hf) is transformers.GPT2LMHeadModel and hf.config.eos_token_id == tokenizer.end_of_text
    ids = torch.tensor([tokenizer.encode(text)[:16] for text in TEXTS])
    assert_same_logits(model, hf, ids)
    for text in [*TEXTS, "Naïve café 🤖 <|endoftext|>  tabs\tand\r\nlines   ", " 'll've 1,234.5 \u00a0x"]:
        assert hf_tokenizer(text)["input_ids"] == tokenizer.encode(text), text
        assert hf_tokenizer.decode(tokenizer.encode(text)) == text


def test_a_llama_style_model_is_a_llama_with_our_logits_and_our_greedy_text(tmp_path):
    model = random_gpt(**LLAMA, n_kv_head=2, rope_base=500.0)
    hf, _ = exported(model, CHARS, tmp_path)
    assert type(hf) is transformers.LlamaForCausalLM and hf.config.num_key_value_heads == 2
    ids = torch.randint(0, CHARS.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    assert_same_logits(model, hf, ids)
    prompt = ids[:, :6]
    with torch.no_grad():
        theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False)
    assert torch.equal(generate(model, prompt, 8, temperature=0), theirs)  # cached decoding agrees too


def test_a_sliding_window_makes_a_mistral(tmp_path):
    model = random_gpt(**LLAMA, n_kv_head=1, window=4, tie_weights=True)
    hf, _ = exported(model, CHARS, tmp_path)
    assert type(hf) is transformers.MistralForCausalLM and hf.config.sliding_window == 4
    ids = torch.randint(0, CHARS.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    assert_same_logits(model, hf, ids)
    model.blocks[0].attn.window = model.blocks[1].attn.window = None  # the window matters: without it, other logits
    with torch.no_grad():
        assert (model(ids)[0] - hf(ids).logits).abs().max() > 0.1


@pytest.mark.parametrize("options, named", [
    (dict(), "GPT2LMHeadModel cannot express this model's lm_head_bias=True (it needs False)"),
    (dict(lm_head_bias=False, position="alibi"), "position='alibi' (it needs 'learned' or 'none')"),
    (dict(lm_head_bias=False, use_residual=False, causal=False),
     "GPT2LMHeadModel cannot express this model's use_residual=False (it needs True); causal=False (it needs True)"),
    (dict(LLAMA, bias=True, scale_attention=False),
     "LlamaForCausalLM cannot express this model's bias=True (it needs False); scale_attention=False (it needs True)"),
    (dict(lm_head_bias=False, n_kv_head=2), "GPT2LMHeadModel cannot express this model's n_kv_head=2 (it needs None)"),
])
def test_options_transformers_cannot_express_are_refused_by_name_before_anything_is_written(options, named, tmp_path):
    with pytest.raises(NotExpressible) as refused:
        to_transformers(random_gpt(**options), CHARS, {}, tmp_path / "out")
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_in_one_line(tmp_path):
    save(tmp_path / "lecture", random_gpt(), CHARS)  # Karpathy's lecture model: a bias on its LM head
    result = call_cli("export", str(tmp_path / "lecture"), "--to", "transformers", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == ("error: transformers' GPT2LMHeadModel cannot express this model's lm_head_bias=True "
                             "(it needs False)\n")


# ---------------------------------------------------------------- the model card


def test_the_model_card_says_what_was_trained_and_how_to_load_it(trained):
    checkpoint, out = trained
    text = (out / CARD_FILE).read_text()
    card = huggingface_hub.ModelCard(text)  # the Hub's own reading of it: front matter, then Markdown
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert card.data.tags == ["attention-playground", "gpt2", "character-level"]
    headings = re.findall(r"^## (.+)$", card.text, flags=re.M)
    assert headings == ["Model", "Data", "Training", "Tokenizer", "How to load it"]
    assert "| `n_layer` | `1` |" in text and "| `lm_head_bias` | `False` |" in text  # every option
    assert "Copy task (the `repeat` preset): Random 8-letter words" in text
    history = load_trainer_state(checkpoint)["history"]
    final_val = [row["val_loss"] for row in history if row["val_loss"] is not None][-1]
    assert f"40 steps. Final losses (cross-entropy, nats per token): training {history[-1]['train_loss']:.4f}" in text
    assert f"validation {final_val:.4f}" in text and "| `batch_size` | `4` |" in text and "`device`" not in text
    # the curve: referenced, beside the card, a PNG with the training line drawn in it
    assert re.search(rf"!\[[^]]+\]\({re.escape(CURVE_FILE)}\)", text)
    with Image.open(out / CURVE_FILE) as image:
        assert image.format == "PNG" and image.size == (720, 360)
        colours = {colour for _, colour in image.convert("RGB").getcolors(720 * 360)}
    assert tuple(int(TRAIN_COLOR[i: i + 2], 16) for i in (1, 3, 5)) in colours
    # the loading code runs as it is written
    code = re.search(r"```python\n(.*?)```", text, flags=re.S)[1]
    assert f"from_pretrained({str(out)!r})" in code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(ast.parse(code), CARD_FILE, "exec"), {})
    assert printed.getvalue().startswith("\n") and len(printed.getvalue()) == 16 + 1  # a context of 16 characters


# ---------------------------------------------------------------- the Hub


class RecordingHub:
    """Stands in for huggingface_hub.HfApi: records each call, and what the folder held at upload time."""

    calls: list = []

    def __init__(self, token=None):
        self.calls.append(("HfApi", token))

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, *, folder_path, **kwargs):
        held = sorted(p.name for p in folder_path.iterdir())
        self.calls.append(("upload_folder", held, kwargs))
        return huggingface_hub.CommitInfo(commit_url=f"https://huggingface.co/{kwargs['repo_id']}/commit/1",
                                          commit_message="", commit_description="", oid="1")


def test_push_to_hub_creates_the_repo_and_uploads_the_export_alone(trained, tmp_path, monkeypatch):
    checkpoint, _ = trained
    monkeypatch.setattr(core.export, "HfApi", RecordingHub)
    monkeypatch.setattr(RecordingHub, "calls", [])
    out = tmp_path / "hf"
    out.mkdir()
    (out / "notes.txt").write_text("mine, not the model's")
    result = call_cli("export", str(checkpoint), "--to", "transformers", str(out), "--push-to-hub", "me/tiny-copy")
    assert result.returncode == 0 and "uploaded to https://huggingface.co/me/tiny-copy/commit/1" in result.stderr
    (_, token), (_, repo, created), (_, held, uploaded) = RecordingHub.calls
    assert token is None and repo == "me/tiny-copy" and created == dict(repo_type="model", exist_ok=True)
    assert held == sorted([*FILES, "notes.txt"])
    assert uploaded["repo_id"] == "me/tiny-copy" and uploaded["repo_type"] == "model"
    assert sorted(uploaded["allow_patterns"]) == sorted(FILES)  # not notes.txt
    assert "from_pretrained('me/tiny-copy')" in (out / CARD_FILE).read_text()  # the card loads it from the Hub


def test_the_real_client_stops_at_the_network_boundary(trained, tmp_path, monkeypatch):
    checkpoint, out = trained
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # refused before any connection
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")  # as if logged in: the request itself is made
    with pytest.raises(huggingface_hub.errors.OfflineModeIsEnabled, match="api/repos/create"):
        push_to_hub(out, "me/tiny-copy")
    result = call_cli("export", str(checkpoint), "--to", "transformers", str(tmp_path / "hf"), "--push-to-hub", "me/x")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"error: uploading {tmp_path / 'hf'} to me/x failed: OfflineModeIsEnabled: " in result.stderr
    assert (tmp_path / "hf" / "model.safetensors").is_file()  # the export itself is there


# ---------------------------------------------------------------- the app


def test_the_checkpoint_panel_exports_the_sessions_model_as_a_zip(tmp_path):
    from playground.tabs.train import TrainHandlers

    train = TrainHandlers(make_ctx())
    assert train.checkpoints.export_note("a") == (NO_MODEL_TO_EXPORT, gr.update(interactive=False))
    with pytest.raises(gr.Error, match="no model to export"):
        train.checkpoints.export_transformers("a")
    run_train(train, "a")  # the copy task's default model: a bias on its LM head
    refused = "GPT2LMHeadModel cannot express this model's lm_head_bias=True.*Shakespeare, CPU recipe"
    note, button = train.checkpoints.export_note("a")  # said beside the button, before any click
    assert re.search(refused, note) and button == gr.update(interactive=False)
    with pytest.raises(gr.Error, match=refused):  # and to a caller of the API
        train.checkpoints.export_transformers("a")
    hostile = "../" * 8 + str(tmp_path / "elsewhere")  # a session hash is only ever a key
    run_train(train, hostile, preset="shakespeare-char-cpu")  # nanoGPT's model: no biases, untied
    assert train.checkpoints.export_note(hostile) == ("This model exports as transformers' `GPT2LMHeadModel`.",
                                          gr.update(interactive=True))
    path = train.checkpoints.export_transformers(hostile)
    session = train.ctx.registry.get(hostile)
    assert path == str(train.scratch / session.id / "gpt-step20-transformers.zip")  # named by the server
    assert not (tmp_path / "elsewhere").exists()
    with zipfile.ZipFile(path) as archive:
        files = [name for name in archive.namelist() if not name.endswith("/")]  # (and the folder itself)
        assert sorted(files) == sorted(f"gpt-step20-transformers/{name}" for name in FILES)
        # every file unzips readable by all, as written with the usual umask of 022 (the weights were 0600)
        assert {oct(archive.getinfo(name).external_attr >> 16 & 0o777) for name in files} == {"0o644"}
        archive.extractall(tmp_path)
    folder = tmp_path / "gpt-step20-transformers"
    assert "from_pretrained('gpt-step20-transformers')" in (folder / CARD_FILE).read_text()  # as it unzips
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([session.tokenizer.encode("abcdefgh|abcdefg")])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, session.model.eval()(ids)[0], atol=1e-5, rtol=0)
    assert sorted(p.name for p in (train.scratch / session.id).iterdir()) == ["gpt-step20-transformers.zip"]


def test_the_export_takes_its_turn_with_the_checkpoints():
    from playground.app import build_app
    from playground.settings import Settings

    events = {fn.api_name: fn for fn in build_app(Settings(step_workers="off")).fns.values() if fn.api_name}
    for name in ("export_transformers", "save_checkpoint"):
        assert (events[name].concurrency_id, events[name].concurrency_limit) == ("checkpoint", 1)


def test_every_exported_file_has_the_same_mode_as_a_plain_file(tmp_path):
    """safetensors writes its file as 0600: the weights would be the one file others cannot read."""
    previous = os.umask(0o022)
    try:
        to_transformers(random_gpt(lm_head_bias=False), CHARS, {}, tmp_path)
    finally:
        os.umask(previous)
    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in tmp_path.iterdir()}
    assert modes and set(modes.values()) == {"0o644"}, modes


def readme_presets(kind: str) -> list[str]:
    """The presets the README's export section lists after `kind`'s marker, in its order."""
    line = next(line for line in README.read_text().splitlines() if line.startswith(f"- **{kind}"))
    return re.findall(r"`([a-z0-9-]+)`", line.split(":**", 1)[1])


def test_the_readme_names_which_presets_export_by_the_exports_own_rule():
    """Each preset in one of the README's three lists, the one core.export's rule puts it in."""
    def exports(name, **changes):
        return core.export.refusal(preset_configs(name, vocab_size=65, **changes)[0]) is None

    as_they_are = [name for name in PRESETS if exports(name)]
    without_bias = [name for name in PRESETS if not exports(name) and exports(name, lm_head_bias=False)]
    never = [name for name in PRESETS if name not in as_they_are + without_bias]
    assert readme_presets("Export as they are") == as_they_are
    assert readme_presets("Export with `--set lm_head_bias=false`") == without_bias
    assert readme_presets("Never export") == never
    assert as_they_are == exported_as_they_are()  # the app's note names the same ones
    assert "induction-rope" in never and "repeat" in without_bias  # the rule sees what the README says
