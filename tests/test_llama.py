"""Pretrained Llama-architecture models: tiny random Hugging Face Llamas (grouped queries, RoPE,
RMSNorm, SwiGLU), saved as safetensors with a tokenizer built here, read by `core.pretrained.load_llama`
into this project's GPT, compute what transformers computes. Nothing touches the network."""

import json

import pytest
import torch
import transformers

from core.pretrained import llama_config, load_llama, rope_theta
from core.sample import generate
from support.models import WORDS, saved, tiny_llama, word_tokenizer

TEXT = "the quick brown fox jumps over the lazy dog and then the hobbit lived in a hole"


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def pair(request, tmp_path_factory):
    model = tiny_llama(tie_word_embeddings=request.param)
    return model, load_llama(saved(model, tmp_path_factory.mktemp("llama")))


def test_the_config_maps_onto_todays_options(pair):
    hf, ours = pair
    config = ours.model.config
    assert (config.position, config.norm, config.activation, config.n_kv_head) == ("rope", "rmsnorm", "swiglu", 2)
    assert (config.n_layer, config.n_head, config.n_embd, config.mlp_hidden) == (2, 4, 64, 96)
    assert config.tie_weights == hf.config.tie_word_embeddings and not config.bias


def test_logits_and_every_attention_layer_match_transformers(pair):
    hf, ours = pair
    ids = torch.tensor([ours.tokenizer.encode(TEXT)])
    with torch.no_grad():
        expected = hf(ids, output_attentions=True)
        logits, _, attentions = ours.model(ids, return_attention=True)
    assert torch.allclose(logits, expected.logits, atol=1e-5)
    assert len(attentions) == len(expected.attentions) == 2
    for mine, theirs in zip(attentions, expected.attentions):
        assert torch.allclose(mine, theirs, atol=1e-5)
    with ours.model.explicit_attention():  # the fused path agrees as well
        assert torch.allclose(ours.model(ids)[0], logits, atol=1e-5)


def test_greedy_decoding_with_the_cache_gives_transformers_tokens(pair):
    hf, ours = pair
    prompt = torch.tensor([ours.tokenizer.encode("the quick brown")])
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours.model, prompt, 12, temperature=0), theirs)


def test_the_tokenizer_round_trips_through_the_loader(pair):
    _, ours = pair
    ids = ours.tokenizer.encode(TEXT)
    assert ids == word_tokenizer().encode(TEXT).ids and ours.tokenizer.decode(ids) == TEXT
    assert ours.tokenizer.vocab_size == len(WORDS) + 1 and ours.tokenizer.token_label(ids[1]) == "quick"


def test_rope_theta_is_read_from_transformers_4_and_5_configs():
    assert rope_theta({"rope_theta": 100000.0, "rope_scaling": None}) == 100000.0  # SmolLM2's, transformers 4
    assert rope_theta({"rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}) == 500000.0
    assert rope_theta({}) == 10000.0
    for scaled in ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, {"rope_parameters": {"rope_type": "yarn"}}):
        with pytest.raises(ValueError, match="only plain RoPE"):
            rope_theta(scaled)


def test_a_saved_config_of_this_transformers_is_read(tmp_path):
    saved(tiny_llama(rope_theta=100000.0), tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert llama_config(written).rope_base == 100000.0


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gpt2"}, "model_type"), ({"hidden_act": "gelu"}, "hidden_act"),
    ({"attention_bias": True}, "attention_bias"), ({"head_dim": 8}, "head_dim"),
])
def test_configs_this_gpt_cannot_run_are_refused_by_name(tmp_path, change, message):
    folder = saved(tiny_llama(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=message):
        load_llama(folder)


def test_missing_or_unexpected_tensors_are_named(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = saved(tiny_llama(), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "layers.1.mlp.up_proj" not in k}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"lack blocks\.1\.mlp\.fc\.weight"):
        load_llama(folder)
    save_file({**weights, "model.layers.0.adapter.weight": torch.zeros(2)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"unexpected .*model\.layers\.0\.adapter\.weight"):
        load_llama(folder)


def randomized(hf) -> None:
    """Weights of std 0.3 (norms around 1), so that a mapping mistake cannot hide in near-zero weights; eager
    attention, whose maps transformers returns."""
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if "norm" in name else 0.0))


def test_a_mistral_with_a_sliding_window_matches_transformers(tmp_path):
    # Mistral's layout is Llama's; its sliding window is ours: a query sees itself and window - 1 keys back.
    torch.manual_seed(3)
    config = transformers.MistralConfig(
        vocab_size=len(WORDS) + 1, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, sliding_window=5, rms_norm_eps=1e-5)
    hf = transformers.MistralForCausalLM(config).eval()
    randomized(hf)
    ours = load_llama(saved(hf, tmp_path))
    assert (ours.model.config.window, ours.model.config.n_kv_head) == (5, 2)
    ids = torch.tensor([ours.tokenizer.encode(TEXT)])  # 17 tokens: the window binds
    with torch.no_grad():
        expected = hf(ids, output_attentions=True)
        logits, _, attentions = ours.model(ids, return_attention=True)
    assert torch.allclose(logits, expected.logits, atol=1e-5)
    for mine, theirs in zip(attentions, expected.attentions):
        assert torch.allclose(mine, theirs, atol=1e-5)
        assert (mine[0, :, 10, :6] == 0).all()  # token 10 sees tokens 6 to 10 only
    prompt = ids[:, :3]
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours.model, prompt, 10, temperature=0), theirs)


def test_a_qwen2_with_its_query_key_and_value_biases_matches_transformers(tmp_path):
    # Qwen2's layout is Llama's, with biases on q, k and v: stacked into our qkv's bias like the weights.
    torch.manual_seed(4)
    config = transformers.Qwen2Config(
        vocab_size=len(WORDS) + 1, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=True)
    hf = transformers.Qwen2ForCausalLM(config).eval()
    randomized(hf)
    ours = load_llama(saved(hf, tmp_path))
    assert ours.model.config.qkv_bias and not ours.model.config.bias and ours.model.config.window is None
    ids = torch.tensor([ours.tokenizer.encode(TEXT)])
    with torch.no_grad():
        expected = hf(ids, output_attentions=True)
        logits, _, attentions = ours.model(ids, return_attention=True)
    assert torch.allclose(logits, expected.logits, atol=1e-5)
    for mine, theirs in zip(attentions, expected.attentions):
        assert torch.allclose(mine, theirs, atol=1e-5)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "use_sliding_window": True, "sliding_window": 8}))
    with pytest.raises(ValueError, match="Qwen2 slides only some layers' windows"):
        load_llama(str(tmp_path))
