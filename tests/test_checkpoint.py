"""Checkpoints: exact round trips, and a clear CheckpointError for every kind of damage."""

import json
import tracemalloc
import zipfile

import pytest
import torch
from safetensors.torch import load_file, save_file
from safetensors.torch import save as save_safetensors_bytes

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
    rng = torch.get_rng_state()
    loaded, tokenizer, meta = load(folder)
    assert torch.equal(torch.get_rng_state(), rng)  # no throwaway random initialisation
    assert torch.equal(loaded(IDX)[0], model(IDX)[0])
    assert loaded.config == model.config and not loaded.training
    assert tokenizer.spec() == TOKENIZER.spec() and meta == {"step": 7}
    if model.config.tie_weights:
        assert loaded.lm_head.weight is loaded.token_embedding.weight
    # the loaded tensors became real, trainable parameters (none left on the meta device)
    assert len(list(loaded.parameters())) == len(list(model.parameters()))
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad and p.device.type == "cpu"
               and p.dtype == torch.float32 for p in loaded.parameters())


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
    (lambda f: rewrite_weights(f, lambda t: t["lm_head.bias"].fill_(float("nan"))), "lm_head.bias holds NaN"),
    (lambda f: rewrite_weights(f, lambda t: t["blocks.1.mlp.fc.weight"][3, 4].fill_(float("-inf"))),
     "blocks.1.mlp.fc.weight holds NaN or infinite"),
    (lambda f: rewrite_config(f, lambda d: d.update(model=[f"field{i}" for i in range(10_000)])), "invalid"),
    (lambda f: (f / "config.json").write_text("[" * 100_000 + "]" * 100_000), "not valid JSON"),
])
def test_damaged_folders_give_clear_errors(saved, damage, message):
    folder, _ = saved
    damage(folder)
    with pytest.raises(CheckpointError, match=message) as error:
        load(folder)
    assert len(str(error.value)) < 400  # shown to users: a huge value is never echoed whole


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


def test_missing_archive_member(saved, tmp_path):
    folder, _ = saved
    partial = tmp_path / "partial.zip"
    with zipfile.ZipFile(partial, "w") as zf:
        zf.write(folder / "config.json", "config.json")
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
    (lambda t, i: (t, {**i, "history": [1, 2]}), "history row 1 must be a JSON object"),
    (lambda t, i: (t, {**i, "history": {"step": 1}}), "history must be a list"),
    (lambda t, i: (t, {**i, "history": [{**i["history"][0], "step": "abc"}]}), "row 1: step must be an integer"),
    (lambda t, i: (t, {**i, "history": [{**i["history"][0], "step": 2}]}), "history goes on past its step"),
    (lambda t, i: (t, {**i, "elapsed": 10 ** 400}), "elapsed must be"),
    (lambda t, i: ({**t, "optimizer.0.exp_avg": t["optimizer.0.exp_avg"] * float("nan")}, i),
     "optimizer.0.exp_avg holds NaN or infinite values"),
    (lambda t, i: ({**t, "optimizer.1.exp_avg_sq": t["optimizer.1.exp_avg_sq"] + float("inf")}, i),
     "optimizer.1.exp_avg_sq holds NaN or infinite values"),
    (lambda t, i: (t, {k: v for k, v in i.items() if k != "param_groups"}), "param_groups must be"),
    (lambda t, i: (t, {**i, "param_groups": [{**i["param_groups"][0], "betas": ["a", 0.9]}]}),
     "param group 1: betas must be a finite number"),
    (lambda t, i: (t, {**i, "param_groups": [{**i["param_groups"][0], "eps": float("nan")}]}),
     "param group 1: eps must be a finite number"),
    (lambda t, i: (t, {**i, "param_groups": [{**i["param_groups"][0], "params": ["0"]}]}),
     "param group 1 must list its parameters"),
    (lambda t, i: ({**t, "rng.batch": torch.zeros(3)}, i), "rng.batch must be a byte tensor"),
    (lambda t, i: ({**t, "surprise": torch.zeros(1)}, i), "unexpected tensor surprise"),
    (lambda t, i: ({**t, "optimizer." + "9" * 5000 + ".exp_avg": torch.zeros(1)}, i),
     "unexpected tensor optimizer.999"),
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


# ---------------------------------------------------------------- bounds before allocation


def description(config: GPTConfig, meta: dict | None = None) -> str:
    return json.dumps({"format": checkpoint.FORMAT, "version": checkpoint.VERSION, "model": config.to_dict(),
                       "tokenizer": TOKENIZER.spec(), "meta": meta or {}})


def write_zip(path, config: str, weights: bytes, weights_size: int | None = None):
    """A checkpoint .zip; `weights_size` (bytes of zeros) replaces `weights` to make a zip bomb."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", config)
        if weights_size is None:
            zf.writestr("model.safetensors", weights)
        else:
            with zf.open("model.safetensors", "w", force_zip64=True) as member:
                for _ in range(weights_size // (1 << 20)):
                    member.write(bytes(1 << 20))
    return path


@pytest.fixture
def models_built(monkeypatch):
    """The device (meta or a real one) of every GPT built from now on."""
    devices = []
    original = GPT.__init__

    def counting(self, config, *args, **kwargs):
        devices.append(torch.empty(0).device.type)  # the default device the model's tensors get
        original(self, config, *args, **kwargs)

    monkeypatch.setattr(GPT, "__init__", counting)
    return devices


@pytest.mark.parametrize("form", ["zip", "folder"])
def test_check_config_sees_the_config_before_anything_is_read_or_built(tmp_path, form, models_built):
    """A tiny file whose config claims a 400M-parameter model: the caller's check refuses it before
    the weights are read or any model (even a meta one) is built, and its exception passes unchanged."""
    huge = GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=8, n_layer=2, n_head=2, n_embd=4096)
    if form == "zip":
        path = write_zip(tmp_path / "huge.zip", description(huge), b"x" * 100)
        assert path.stat().st_size < 1000
    else:
        path = tmp_path / "huge"
        path.mkdir()
        (path / "config.json").write_text(description(huge))
        (path / "model.safetensors").write_bytes(b"x" * 100)
    seen = []

    def over_the_caps(config: GPTConfig) -> None:
        seen.append(config)
        raise RuntimeError("over this server's caps")  # a RuntimeError, like some zip errors: not translated

    with pytest.raises(RuntimeError, match="over this server's caps") as error:
        load(path, check_config=over_the_caps)
    assert type(error.value) is RuntimeError and seen == [huge] and models_built == []
    model = small_model()
    folder = save(tmp_path / "ok", model, TOKENIZER)
    models_built.clear()
    load(folder, check_config=seen.append)
    assert seen[-1] == model.config
    assert set(models_built) == {"meta"}  # a load builds no model of real tensors, only meta ones


def test_a_huge_config_without_a_check_is_refused_without_allocating(tmp_path, models_built):
    huge = GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=8, n_layer=2, n_head=2, n_embd=4096)
    weights = save_safetensors_bytes({"token_embedding.weight": torch.zeros(2, 2)})
    with pytest.raises(CheckpointError, match="missing"):
        load(write_zip(tmp_path / "huge.zip", description(huge), weights))
    assert set(models_built) == {"meta"}
    models_built.clear()
    wide = GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=8, n_layer=2, n_head=2, n_embd=1 << 20)
    with pytest.raises(CheckpointError, match="larger than"):
        load(write_zip(tmp_path / "wide.zip", description(wide), weights))
    assert set(models_built) == {"meta"}
    models_built.clear()
    deep = GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=8, n_layer=10 ** 9, n_head=2, n_embd=16)
    with pytest.raises(CheckpointError, match="larger than"):
        load(write_zip(tmp_path / "deep.zip", description(deep), weights))
    assert models_built == []  # refused from the config's numbers: not even a meta model


@pytest.mark.parametrize("lie", [False, True])
def test_a_weights_zip_bomb_is_refused_while_reading(tmp_path, lie):
    """50 MB of zeros in a 50 KB zip, for a model whose weights take 20 KB: refused from its declared
    size, or (when the zip lies about it) while reading, with memory to match the small model."""
    config = small_model().config
    bomb = write_zip(tmp_path / "bomb.zip", description(config), b"", weights_size=50 << 20)
    assert bomb.stat().st_size < 100_000 and checkpoint.weights_bytes(config) < 200_000
    if lie:  # the size a zip64 member declares (in the central directory, which zipfile reads)
        data = bomb.read_bytes()
        declared = (50 << 20).to_bytes(8, "little")
        assert declared in data
        bomb.write_bytes(data.replace(declared, (100).to_bytes(8, "little")))
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="limit" if not lie else "model.safetensors"):
            load(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 << 20


def test_weights_bytes_is_the_exact_tensor_size_plus_header_room(tmp_path):
    for fields in ({}, dict(tie_weights=True, n_layer=3)):
        model = small_model(**fields)
        path = save(tmp_path / "ck", model, TOKENIZER) / "model.safetensors"
        data = path.read_bytes()
        tensor_bytes = len(data) - 8 - int.from_bytes(data[:8], "little")
        assert tensor_bytes == 4 * model.parameter_counts()["total"]
        assert len(data) <= checkpoint.weights_bytes(model.config) <= tensor_bytes + 100_000


def test_meta_fields_are_checked_and_history_normalised(saved):
    folder, _ = saved
    history = [{"step": 1, "train_loss": 3, "lr": 0.001, "extra": "dropped"},
               {"step": 5, "train_loss": 2.5, "val_loss": 2.75, "lr": 0.002}]
    rewrite_config(folder, lambda d: d.update(meta={"corpus": "Tiny Shakespeare", "steps": 5, "history": history}))
    _, _, meta = load(folder)
    assert meta["history"] == [{"step": 1, "train_loss": 3.0, "val_loss": None, "lr": 0.001},
                               {"step": 5, "train_loss": 2.5, "val_loss": 2.75, "lr": 0.002}]
    assert meta["corpus"] == "Tiny Shakespeare" and meta["steps"] == 5


@pytest.mark.parametrize("meta, message", [
    ({"history": [{"step": "abc", "train_loss": 1.0, "lr": 0.1}]}, "history row 1: step must be an integer"),
    ({"history": [{"step": True, "train_loss": 1.0, "lr": 0.1}]}, "row 1: step"),
    ({"history": [{"step": 2, "train_loss": 1.0, "lr": 0.1}, {"step": 2, "train_loss": 1.0, "lr": 0.1}]},
     "row 2: step must be an integer above the previous row's"),
    ({"history": [{"step": 1, "train_loss": "low", "lr": 0.1}]}, "row 1: train_loss must be a finite number"),
    ({"history": [{"step": 1, "train_loss": 1.0}]}, "row 1: lr must be a finite number, got None"),
    ({"history": [{"step": 1, "train_loss": 1.0, "lr": 0.1, "val_loss": [1]}]}, "val_loss must be a number or null"),
    ({"history": [{"step": 1, "train_loss": 1.0, "lr": 0.1, "val_loss": 10 ** 400}]},
     "val_loss must be a number or null"),
    ({"history": [{"step": 1, "train_loss": float("inf"), "lr": 0.1}]}, "train_loss must be a finite number, got inf"),
    ({"history": "x" * 10_000}, "history must be a list"),
    ({"corpus": "x" * 10_000}, "meta.corpus must be a text of at most 256"),
    ({"preset": 3}, "meta.preset must be a text"),
    ({"steps": -1}, "meta.steps must be a non-negative integer"),
    ({"train_config": [1]}, "meta.train_config must be an object"),
])
def test_bad_meta_is_refused_with_a_short_message(saved, meta, message):
    folder, _ = saved
    rewrite_config(folder, lambda d: d.update(meta=meta))
    with pytest.raises(CheckpointError, match=message) as error:
        load(folder)
    assert len(str(error.value)) < 200


def test_check_history_bounds_the_rows():
    rows = [{"step": i, "train_loss": 1.0, "lr": 0.1} for i in range(3)]
    assert len(checkpoint.check_history(rows, max_rows=3)) == 3
    with pytest.raises(CheckpointError, match="at most 2"):
        checkpoint.check_history(rows, max_rows=2)


def test_a_training_state_is_bounded_by_its_model(tmp_path):
    """With the model's config, the trainer file may take what that model's AdamW state and a curve
    of `max_history` rows take, and no more; the curve may have at most `max_history` rows."""
    model = small_model()
    state = training_state(model)
    state["step"] = 40
    state["history"] = [{"step": i, "train_loss": 2.0 + 1 / i, "val_loss": 1 / 3, "lr": 1e-3 / i} for i in range(1, 41)]
    folder = save(tmp_path / "ck", model, TOKENIZER, trainer_state=state)
    size = (folder / "trainer.safetensors").stat().st_size
    assert size <= checkpoint.trainer_bytes(model.config, max_history=40) < size + 100_000
    assert len(checkpoint.load_trainer_state(folder, config=model.config, max_history=40)["history"]) == 40
    with pytest.raises(CheckpointError, match="at most 39"):
        checkpoint.load_trainer_state(folder, config=model.config, max_history=39)
    damage_trainer_file(folder, lambda t, i: ({**t, "padding": torch.zeros(100_000)}, i))
    with pytest.raises(CheckpointError, match="trainer.safetensors is [0-9,]+ bytes; the limit is"):
        checkpoint.load_trainer_state(folder, config=model.config, max_history=40)
    with pytest.raises(CheckpointError, match="unexpected tensor padding"):  # no config: the generous bound
        checkpoint.load_trainer_state(folder)
