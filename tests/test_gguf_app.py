"""GGUF files in the app and on the command line: the operator's folder (.gguf files and an Ollama models folder)
named model by model, the Model picker offering those names and nothing else, Generate and Attention reading a
GGUF model, a broken file answered with a note; `python -m core sample --gguf` and `python -m playground --gguf`."""

import hashlib
import json

import pytest
import torch

import gradio as gr
from core.gguf import gguf_models, load_gguf
from playground.__main__ import parse_args
from playground.context import AppContext
from playground.model_picker import YOURS, ModelPicker, choices
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.tabs.attention import AttentionHandlers
from playground.tabs.generate import GenerateHandlers
from support.cli import call_cli
from support.gguf_files import tiny_llama_state, write_gguf

OLLAMA_MODEL = "application/vnd.ollama.image.model"


def ollama_model(models, name: str, tag: str, data: bytes, namespace: str = "library",
                 host: str = "registry.ollama.ai") -> None:
    """A model as Ollama keeps it: the file a blob named by its digest, a manifest listing it as the model layer."""
    digest = hashlib.sha256(data).hexdigest()
    (models / "blobs").mkdir(parents=True, exist_ok=True)
    (models / "blobs" / f"sha256-{digest}").write_bytes(data)
    manifest = models / "manifests" / host / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.license", "digest": "sha256:" + "0" * 64, "size": 1},
        {"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}", "size": len(data)},
    ]}))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An operator's folder: two .gguf files (one broken) that are also an Ollama models folder."""
    models = tmp_path_factory.mktemp("models")
    tiny = write_gguf(models / "tiny.gguf", tiny_llama_state())
    (models / "broken.gguf").write_bytes(tiny.read_bytes()[:-100])
    (models / "notes.txt").write_text("not a model")
    ollama_model(models, "smol", "latest", tiny.read_bytes())
    ollama_model(models, "smol", "q8", b"another file", namespace="someone")
    ollama_model(models, "smol", "hf", b"a third", host="hf.co", namespace="org")
    junk = models / "manifests" / "registry.ollama.ai" / "library" / "junk"
    junk.mkdir(parents=True)
    (junk / "latest").write_text("{not json")  # skipped, as is a manifest whose blob is missing:
    (junk / "gone").write_text(json.dumps({"layers": [{"mediaType": OLLAMA_MODEL, "digest": "sha256:" + "1" * 64}]}))
    return models


def test_a_folder_offers_its_gguf_files_and_ollamas_models_by_name(folder):
    models = gguf_models(folder)
    assert list(models) == ["broken", "hf.co/org/smol:hf", "smol:latest", "someone/smol:q8", "tiny"]
    assert models["tiny"] == folder / "tiny.gguf"
    assert models["smol:latest"].read_bytes() == (folder / "tiny.gguf").read_bytes()
    assert models["smol:latest"].parent == folder / "blobs" and models["smol:latest"].name.startswith("sha256-")
    assert gguf_models(folder / "tiny.gguf") == {"tiny": folder / "tiny.gguf"}  # one file
    assert gguf_models(folder / "blobs") == {}


def make_ctx(folder) -> AppContext:
    with gr.Blocks():
        return AppContext(settings=Settings(gguf_dir=str(folder), max_new_tokens=50),
                          registry=SessionRegistry(10**9, 3600.0), model_changed=gr.Textbox(), tabs=gr.Tabs())


def test_the_picker_offers_the_operators_models_and_generate_and_attention_read_one(folder):
    ctx = make_ctx(folder)
    labels = dict((value, label) for label, value in choices(ctx))
    assert labels["gguf:smol:latest"] == "smol:latest (GGUF file)" and labels["gguf:tiny"] == "tiny (GGUF file)"
    assert list(labels)[:4] == [YOURS, "gpt2", "smollm2", "gguf:broken"]  # after the catalogue's, in the folder's order
    choice, note, described = ModelPicker(ctx).use_model("gguf:smol:latest", "alice")
    assert choice == "gguf:smol:latest" and "smol:latest is read-only here" in note
    assert described.startswith("smol:latest (a GGUF file on this server): 2 layers x 4 heads sharing 2 key/value heads")
    reading = ctx.registry.get("alice").reading
    expected = load_gguf(folder / "tiny.gguf").model
    assert all(torch.equal(p, reading.model.state_dict()[name]) for name, p in expected.state_dict().items())
    status = list(GenerateHandlers(ctx).generate("the", 5, 0.0, 0, 1.0, 1, request="alice"))[-1][2]
    assert status.startswith("5 tokens.")
    status, *_ = AttentionHandlers(ctx).analysis.analyse("the theis the", "alice")
    assert "2 layer(s) x 4 head(s)" in status


@pytest.mark.parametrize("bad", [str(__file__), "gguf:../tiny", "gguf:tiny.gguf", "tiny", "gguf:"])
def test_a_request_names_one_of_the_operators_models_never_a_path(folder, bad):
    with pytest.raises(gr.Error, match="Model must be one of"):
        ModelPicker(make_ctx(folder)).use_model(bad, "alice")


def test_a_broken_file_leaves_the_session_as_it_was_with_a_note(folder, monkeypatch):
    ctx = make_ctx(folder)
    monkeypatch.setattr(gr, "Warning", lambda message: None)
    picker = ModelPicker(ctx)
    picker.use_model("gguf:tiny", "alice")
    choice, note, changed = picker.use_model("gguf:broken", "alice")
    assert choice == "gguf:tiny" and changed == gr.skip()
    learner, operator = note.split("\n\n")
    assert "broken cannot be read here" in learner and "still read tiny" in learner and "PLAYGROUND" not in learner
    assert "its file is not a GGUF model this app can read" in learner and str(folder) not in note
    assert "PLAYGROUND_GGUF_DIR" in operator and "Q4_1" in operator
    assert ctx.registry.get("alice").pretrained.source == "gguf:tiny"


def test_without_the_setting_no_gguf_model_is_offered():
    with gr.Blocks():
        ctx = AppContext(settings=Settings(), registry=SessionRegistry(10**9, 3600.0), model_changed=gr.Textbox(),
                         tabs=gr.Tabs())
    assert [value for _, value in choices(ctx)] == [YOURS, "gpt2", "smollm2"]


def test_the_command_lines_take_a_gguf_path(folder, tmp_path):
    sampled = call_cli("sample", "--gguf", str(folder / "tiny.gguf"), "--prompt", "the", "--max-new-tokens", "4",
                       "--temperature", "0")
    assert sampled.returncode == 0, sampled.stderr
    assert sampled.stdout.startswith("the") and len(sampled.stdout) > len("the\n")
    broken = call_cli("sample", "--gguf", str(folder / "broken.gguf"))
    assert broken.returncode == 2 and "broken.gguf is truncated" in broken.stderr and "Traceback" not in broken.stderr
    assert parse_args(["--gguf", str(folder)]).gguf == folder
    with pytest.raises(SystemExit):
        parse_args(["--gguf", str(tmp_path / "absent.gguf")])
