"""Checkpoints: exact round trips, and a clear CheckpointError for every kind of damage."""

import json
import zipfile

import pytest
import torch
from safetensors.torch import load_file, save_file

from core import checkpoint
from core.checkpoint import CheckpointError, load, save, save_archive
from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import CharTokenizer, GPT2Tokenizer

TOKENIZER = CharTokenizer("\n abcdefghij")


def small_model(**fields) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=TOKENIZER.vocab_size, block_size=8, n_layer=2, n_head=2, n_embd=16)
    return GPT(GPTConfig(**{**config, **fields})).eval()


IDX = torch.tensor([[1, 2, 3, 4, 5, 6]])


@pytest.fixture
def saved(tmp_path):
    model = small_model()
    return save(tmp_path / "ck", model, TOKENIZER, {"step": 7, "note": "héllo"}), model


@pytest.mark.parametrize("fields", [{}, dict(tie_weights=True, bias=False, qkv_bias=False, lm_head_bias=False)])
def test_folder_round_trip_gives_identical_logits(tmp_path, fields):
    model = small_model(**fields)
    folder = save(tmp_path / "ck", model, TOKENIZER, {"step": 7})
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    loaded, tokenizer, meta = load(folder)
    assert torch.equal(loaded(IDX)[0], model(IDX)[0])
    assert loaded.config == model.config and not loaded.training
    assert tokenizer.spec() == TOKENIZER.spec() and meta == {"step": 7}
    if model.config.tie_weights:
        assert loaded.lm_head.weight is loaded.token_embedding.weight


def test_archive_round_trip(tmp_path):
    model = small_model()
    archive = save_archive(tmp_path / "download", model, TOKENIZER, {"a": [1, 2]})
    assert archive.name == "download.zip"
    assert sorted(zipfile.ZipFile(archive).namelist()) == ["config.json", "model.safetensors"]
    loaded, _, meta = load(archive)
    assert torch.equal(loaded(IDX)[0], model(IDX)[0]) and meta == {"a": [1, 2]}


def test_gpt2_tokenizer_spec_round_trips(tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50257, block_size=4, n_layer=1, n_head=1, n_embd=4))
    _, tokenizer, _ = load(save(tmp_path / "ck", model, GPT2Tokenizer()))
    assert isinstance(tokenizer, GPT2Tokenizer)


def test_saving_refuses_what_could_not_be_loaded(tmp_path):
    with pytest.raises(ValueError, match="tokenizer"):
        save(tmp_path / "a", small_model(), CharTokenizer("ab"))
    with pytest.raises(ValueError, match="meta"):
        save(tmp_path / "b", small_model(), TOKENIZER, {"x": object()})


def rewrite_config(folder, change):
    path = folder / "config.json"
    description = json.loads(path.read_text())
    change(description)
    path.write_text(json.dumps(description))


def rewrite_weights(folder, change):
    path = folder / "model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "config.json").write_text("{not json"), "not valid JSON"),
    (lambda f: (f / "config.json").write_bytes(b"\xff\xfe"), "not valid JSON"),
    (lambda f: (f / "config.json").unlink(), "no config.json"),
    (lambda f: (f / "model.safetensors").unlink(), "no model.safetensors"),
    (lambda f: rewrite_config(f, lambda d: d.update(format="something else")), "not an Attention Playground"),
    (lambda f: rewrite_config(f, lambda d: d.update(version=99)), "version"),
    (lambda f: rewrite_config(f, lambda d: d["model"].update(n_head=3)), "divisible"),
    (lambda f: rewrite_config(f, lambda d: d["model"].update(colour="red")), "unknown GPTConfig"),
    (lambda f: rewrite_config(f, lambda d: d.update(model=None)), "invalid"),
    (lambda f: rewrite_config(f, lambda d: d.update(tokenizer={"kind": "sentencepiece"})), "tokenizer"),
    (lambda f: rewrite_config(f, lambda d: d["tokenizer"].update(chars="ab")), "tokenizer has 2"),
    (lambda f: rewrite_config(f, lambda d: d["model"].update(n_embd=32)), "shape"),
    (lambda f: rewrite_config(f, lambda d: d["model"].update(n_layer=3)), "missing"),
    (lambda f: rewrite_weights(f, lambda t: t.pop("lm_head.bias")), "missing.*lm_head.bias"),
    (lambda f: rewrite_weights(f, lambda t: t.update(extra=torch.zeros(1))), "unexpected.*extra"),
    (lambda f: rewrite_weights(f, lambda t: t.update({"lm_head.bias": torch.zeros(3)})), "shape"),
    (lambda f: rewrite_weights(f, lambda t: t.update({"lm_head.bias": torch.zeros(12, dtype=torch.int64)})), "dtype"),
])
def test_damaged_folders_give_clear_errors(saved, damage, message):
    folder, _ = saved
    damage(folder)
    with pytest.raises(CheckpointError, match=message):
        load(folder)


@pytest.mark.parametrize("keep", [0, 7, 100, -50])
def test_truncated_weights_give_clear_errors(saved, keep):
    folder, _ = saved
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(CheckpointError, match="damaged or truncated"):
        load(folder)


def test_pickles_are_never_loaded(saved):
    folder, model = saved
    torch.save(model.state_dict(), folder / "model.safetensors")  # a pickle under the expected name
    with pytest.raises(CheckpointError):
        load(folder)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load(tmp_path / "missing")
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"PK not really a zip")
    with pytest.raises(CheckpointError, match="valid .zip"):
        load(junk)
    half = tmp_path / "half.zip"
    save_archive(half, small_model(), TOKENIZER)
    half.write_bytes(half.read_bytes()[:-40])
    with pytest.raises(CheckpointError):
        load(half)


def test_archive_members_are_size_capped(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", "{" + " " * 5_000_000 + "}")  # 5 MB that compresses to a few KB
        zf.writestr("model.safetensors", b"")
    assert bomb.stat().st_size < 50_000
    with pytest.raises(CheckpointError, match="limit"):
        load(bomb)
    # a member whose header lies about its size is still cut off at the limit
    monkeypatch.setattr(checkpoint, "MAX_CONFIG_BYTES", 1000)
    liar = tmp_path / "liar.zip"
    with zipfile.ZipFile(liar, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", "x" * 5000)
        zf.writestr("model.safetensors", b"")
    info = zipfile.ZipFile(liar).getinfo("config.json")
    data = bytearray(liar.read_bytes())
    # shrink the declared size in the central directory and the local header
    declared = info.file_size.to_bytes(4, "little")
    data = data.replace(declared, (10).to_bytes(4, "little"))
    liar.write_bytes(bytes(data))
    with pytest.raises(CheckpointError):
        load(liar)


def test_missing_archive_member(tmp_path):
    partial = tmp_path / "partial.zip"
    with zipfile.ZipFile(partial, "w") as zf:
        zf.writestr("config.json", "{}")
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load(partial)
