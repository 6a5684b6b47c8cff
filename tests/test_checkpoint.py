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


# ---------------------------------------------------------------- the training state


def training_state(model: GPT) -> dict:
    """A real state: one AdamW step on `model`, as `Trainer.state_dict()` shapes it."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(IDX, IDX)[1].backward()
    optimizer.step()
    return {"step": 1, "elapsed": 0.5, "history": [{"step": 1, "train_loss": 2.0, "val_loss": None, "lr": 1e-3}],
            "optimizer": optimizer.state_dict(), "batch_rng": torch.Generator().get_state(),
            "dropout_rng": torch.Generator().manual_seed(1).get_state()}


def test_training_state_round_trips_and_is_optional(tmp_path):
    model = small_model()
    state = training_state(model)
    folder = save(tmp_path / "ck", model, TOKENIZER, trainer_state=state)
    loaded = checkpoint.load_trainer_state(folder)
    assert (loaded["step"], loaded["elapsed"], loaded["history"]) == (1, 0.5, state["history"])
    assert torch.equal(loaded["batch_rng"], state["batch_rng"])
    assert loaded["optimizer"]["param_groups"] == json.loads(json.dumps(state["optimizer"]["param_groups"]))
    for index, moments in state["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(loaded["optimizer"]["state"][index][key], value)
    save(folder, model, TOKENIZER)  # saved again without a state: the old one must not linger
    assert not (folder / "trainer.safetensors").exists() and checkpoint.load_trainer_state(folder) is None
    assert checkpoint.load_trainer_state(save_archive(tmp_path / "plain", model, TOKENIZER)) is None


def damage_trainer_file(folder, change):
    path = folder / "trainer.safetensors"
    tensors = load_file(path)
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    info = json.loads(header["__metadata__"]["trainer"])
    tensors, info = change(tensors, info)
    save_file(tensors, path, metadata={"trainer": json.dumps(info)})


@pytest.mark.parametrize("change, message", [
    (lambda t, i: (t, {**i, "step": -1}), "step must be a non-negative integer"),
    (lambda t, i: (t, {**i, "elapsed": "soon"}), "elapsed must be"),
    (lambda t, i: (t, {**i, "history": [1, 2]}), "history must be a list of JSON objects"),
    (lambda t, i: (t, {k: v for k, v in i.items() if k != "param_groups"}), "param_groups must be"),
    (lambda t, i: ({**t, "rng.batch": torch.zeros(3)}, i), "rng.batch must be a byte tensor"),
    (lambda t, i: ({**t, "surprise": torch.zeros(1)}, i), "unexpected tensor surprise"),
])
def test_damaged_training_states_give_clear_errors(tmp_path, change, message):
    model = small_model()
    folder = save(tmp_path / "ck", model, TOKENIZER, trainer_state=training_state(model))
    damage_trainer_file(folder, change)
    with pytest.raises(CheckpointError, match=message):
        checkpoint.load_trainer_state(folder)


def test_truncated_or_foreign_training_state_gives_a_clear_error(tmp_path):
    model = small_model()
    folder = save(tmp_path / "ck", model, TOKENIZER, trainer_state=training_state(model))
    path = folder / "trainer.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="damaged or truncated"):
        checkpoint.load_trainer_state(folder)
    save_file({"x": torch.zeros(2)}, path)  # valid safetensors, but no training state in it
    with pytest.raises(CheckpointError, match="damaged or truncated"):
        checkpoint.load_trainer_state(folder)
