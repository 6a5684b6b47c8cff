"""Pretrained GPT-2: tiny random Hugging Face GPT-2s, saved and read back, compute what transformers computes.

Nothing here touches the network: the models are made on the spot, and the Hub is only asked in offline mode.
"""

import json
import pickle

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from core.config import ACTIVATIONS
from core.model import ACTIVATION_LAYERS
from core.pretrained import PretrainedUnavailable, load_gpt2
from core.sample import generate
from core.tokenizers import GPT2Tokenizer

TEXTS = ["The quick brown fox jumps over the lazy dog, and then", "In a hole in the ground there lived a hobbit."]
T = 10  # tokens per sequence


def tiny_gpt2(seed: int = 0, **overrides) -> transformers.GPT2LMHeadModel:
    """A seeded random GPT-2 (GPT-2's vocabulary, 2 layers, 32 channels), eager attention so it returns weights.
    Every weight, biases and LayerNorms included, is redrawn large: a wrong mapping cannot hide in near-zeros."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=4, **overrides)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if ".ln_" in name and name.endswith(".weight") else 0.0))
    return model


def saved(model: transformers.GPT2LMHeadModel, folder) -> str:
    model.save_pretrained(folder)  # safetensors, names with the "transformer." prefix
    return str(folder)


def copy_config(hf_folder, folder, **changes) -> None:
    config = json.loads(open(f"{hf_folder}/config.json").read()) | changes
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def hf_model():
    return tiny_gpt2()


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    tokenizer = GPT2Tokenizer()
    return torch.tensor([tokenizer.encode(text)[:T] for text in TEXTS])  # (2, T) real GPT-2 tokens


@pytest.fixture(scope="module")
def hf_folder(hf_model, tmp_path_factory):
    return saved(hf_model, tmp_path_factory.mktemp("gpt2"))


def test_every_activation_has_a_layer():
    assert set(ACTIVATION_LAYERS) == set(ACTIVATIONS)
    x = torch.linspace(-3, 3, 50)
    assert torch.allclose(ACTIVATION_LAYERS["gelu_tanh"]()(x), transformers.activations.NewGELUActivation()(x), atol=1e-6)


def test_logits_and_every_attention_layer_match_transformers(hf_model, hf_folder, tokens):
    loaded = load_gpt2(hf_folder)
    model = loaded.model
    assert model.config.activation == "gelu_tanh" and model.config.block_size == 64
    assert isinstance(loaded.tokenizer, GPT2Tokenizer)
    with torch.no_grad():
        expected = hf_model(tokens, output_attentions=True)
        logits, _, attention = model(tokens, return_attention=True)
    assert expected.logits.std() > 1  # large enough that a mapping mistake would show
    torch.testing.assert_close(logits, expected.logits, atol=1e-5, rtol=0)
    assert len(attention) == len(expected.attentions) == 2
    for ours, theirs in zip(attention, expected.attentions):
        assert ours.shape == (2, 4, T, T)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_the_model_is_read_only_and_tied(hf_folder):
    model = load_gpt2(hf_folder).model
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert model.lm_head.weight is model.token_embedding.weight
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())


def test_cached_greedy_generation_matches_transformers(hf_model, hf_folder, tokens):
    model = load_gpt2(hf_folder).model
    with torch.no_grad():
        expected = hf_model.generate(tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=6,
                                     do_sample=False, pad_token_id=0)
    assert torch.equal(generate(model, tokens, 6, temperature=0, use_cache=True), expected)


def test_weights_without_the_transformer_prefix_load(hf_model, hf_folder, tokens, tmp_path):
    # The Hub's original `gpt2` repo names its tensors wte.weight, h.0.attn.c_attn.weight, ...; it
    # also keeps the old causal-mask buffers, which are not weights.
    weights = {name.removeprefix("transformer."): t for name, t in load_file(f"{hf_folder}/model.safetensors").items()}
    weights |= {f"h.{i}.attn.bias": torch.ones(1, 1, 64, 64).tril() for i in range(2)}
    save_file(weights, tmp_path / "model.safetensors")
    copy_config(hf_folder, tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(load_gpt2(str(tmp_path)).model(tokens)[0], hf_model(tokens).logits, atol=1e-5, rtol=0)


def test_a_sharded_folder_loads(hf_folder, tmp_path):
    weights = load_file(f"{hf_folder}/model.safetensors")
    names = sorted(weights)
    shards = {"one.safetensors": names[: len(names) // 2], "two.safetensors": names[len(names) // 2:]}
    for shard, shard_names in shards.items():
        save_file({n: weights[n] for n in shard_names}, tmp_path / shard)
    index = {"weight_map": {n: shard for shard, shard_names in shards.items() for n in shard_names}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    copy_config(hf_folder, tmp_path)
    model = load_gpt2(str(tmp_path)).model
    assert torch.equal(model.ln_f.weight, weights["transformer.ln_f.weight"])


class Bomb:
    def __reduce__(self):
        return (pytest.fail, ("the pickle was loaded",))


def test_pickled_weights_are_refused_unread(hf_folder, tmp_path):
    copy_config(hf_folder, tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(Bomb()))
    with pytest.raises(ValueError, match=r"pickled weights \(pytorch_model.bin\).*refused.*model.safetensors"):
        load_gpt2(str(tmp_path))


@pytest.mark.parametrize("changes, message", [
    (dict(model_type="llama"), "model_type is 'llama': only 'gpt2'"),
    (dict(vocab_size=50304), "vocab_size is 50304: GPT-2's tokenizer has 50257"),
    (dict(activation_function="silu"), "activation_function 'silu'"),
    (dict(layer_norm_epsilon=1e-6), "layer_norm_epsilon=1e-06"),
    (dict(n_inner=64), "n_inner is 64"),
])
def test_configs_this_gpt_cannot_run_are_refused(hf_folder, tmp_path, changes, message):
    copy_config(hf_folder, tmp_path, **changes)
    (tmp_path / "model.safetensors").symlink_to(f"{hf_folder}/model.safetensors")
    with pytest.raises(ValueError, match=message):
        load_gpt2(str(tmp_path))


def test_a_missing_tensor_is_named(hf_folder, tmp_path):
    weights = load_file(f"{hf_folder}/model.safetensors")
    del weights["transformer.h.1.mlp.c_fc.bias"]
    save_file(weights, tmp_path / "model.safetensors")
    copy_config(hf_folder, tmp_path)
    with pytest.raises(ValueError, match=r"lack blocks\.1\.mlp\.fc\.bias"):
        load_gpt2(str(tmp_path))


def test_an_unexpected_tensor_is_named(hf_folder, tmp_path):
    weights = load_file(f"{hf_folder}/model.safetensors") | {"transformer.h.0.adapter.weight": torch.zeros(2)}
    save_file(weights, tmp_path / "model.safetensors")
    copy_config(hf_folder, tmp_path)
    with pytest.raises(ValueError, match=r"unexpected .*h\.0\.adapter\.weight"):
        load_gpt2(str(tmp_path))


def test_a_wrongly_shaped_tensor_is_named(hf_folder, tmp_path):
    copy_config(hf_folder, tmp_path, n_positions=32)  # the file's position table has 64 rows
    (tmp_path / "model.safetensors").symlink_to(f"{hf_folder}/model.safetensors")
    with pytest.raises(ValueError, match=r"position_embedding\.weight \(64, 32\) \(expected \(32, 32\)\)"):
        load_gpt2(str(tmp_path))


def test_an_unreachable_hub_says_how_to_use_a_local_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # and an empty cache: nothing to find, nothing to ask
    with pytest.raises(PretrainedUnavailable, match=r"could not be downloaded.*local folder.*config\.json"):
        load_gpt2("gpt2", cache_dir=tmp_path)


def test_without_dns_the_hub_is_not_waited_for(monkeypatch, tmp_path):
    import socket

    import core.pretrained

    # No HF_HUB_OFFLINE, but the Hub's name does not resolve: only the cache is asked, no retries.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args: (_ for _ in ()).throw(socket.gaierror("no DNS")))
    asked = []
    real = core.pretrained.hf_hub_download
    monkeypatch.setattr(core.pretrained, "hf_hub_download",
                        lambda *args, **kwargs: asked.append(kwargs["local_files_only"]) or real(*args, **kwargs))
    with pytest.raises(PretrainedUnavailable, match="local folder"):
        load_gpt2("gpt2", cache_dir=tmp_path)
    assert asked == [True]


def test_a_name_that_is_neither_a_folder_nor_a_repo_id_is_refused(tmp_path):
    with pytest.raises(ValueError, match="neither a folder here nor a Hugging Face Hub repo id"):
        load_gpt2(str(tmp_path / "no" / "such" / "folder"), cache_dir=tmp_path)


def test_views_share_the_weights_but_not_their_hooks(hf_folder, tokens):
    # Every user of a shared GPT-2 reads it through a view: the same tensors, modules (and hooks) of its own.
    shared = load_gpt2(hf_folder)
    first, second = shared.view(), shared.view()
    for view in (first, second):
        assert view is not shared.model and not view.training
        assert not any(p.requires_grad for p in view.parameters())
        assert view.lm_head.weight is view.token_embedding.weight
        for (name, theirs), ours in zip(shared.model.named_parameters(), view.parameters()):
            assert ours.data_ptr() == theirs.data_ptr(), name
    seen = []
    handle = first.blocks[0].attn.hook_pattern.register_forward_hook(lambda *_: seen.append(1))
    try:
        with torch.no_grad():
            torch.testing.assert_close(second(tokens)[0], shared.model(tokens)[0], atol=0, rtol=0)
            assert not seen
            first(tokens)
    finally:
        handle.remove()
    assert seen == [1]


def test_the_command_line_samples_gpt2_from_a_folder_and_explains_when_it_cannot(hf_folder):
    from core.pretrained import load_gpt2
    from core.sample import generate
    from support.cli import call_cli

    sampled = call_cli("sample", "--gpt2", hf_folder, "--prompt", "Hello, world", "--max-new-tokens", "6",
                      "--temperature", "0")
    assert sampled.returncode == 0, sampled.stderr
    gpt2 = load_gpt2(hf_folder)
    prompt = gpt2.tokenizer.encode("Hello, world")
    greedy = generate(gpt2.model, torch.tensor([prompt]), 6, temperature=0)[0].tolist()
    assert sampled.stdout == gpt2.tokenizer.decode(greedy) + "\n"
    offline = call_cli("sample", "--gpt2", "gpt2", "--max-new-tokens", "1")  # HF_HUB_OFFLINE=1 (conftest)
    assert offline.returncode == 2 and "local folder" in offline.stderr and "Traceback" not in offline.stderr
