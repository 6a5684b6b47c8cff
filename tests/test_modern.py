"""Today's parts as options of the one GPT: rotary and ALiBi positions, grouped queries, sliding
windows, RMSNorm and SwiGLU (issue 22). Each is checked against its definition, and every combination
against the model's own cached decoding and step-by-step arithmetic."""

import itertools
import math

import pytest
import torch

from core.checkpoint import load, save
from core.config import GPTConfig
from core.interventions import head_steps
from core.model import GPT, alibi_slopes, capture_attention, rotate
from core.tokenizers import CharTokenizer

SIZES = dict(vocab_size=13, block_size=16, n_layer=2, n_head=4, n_embd=16)
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
OPTIONS = dict(position=("learned", "rope", "alibi", "none"), norm=("layernorm", "rmsnorm"),
               activation=("gelu", "swiglu"), n_kv_head=(None, 2, 1), window=(None, 3))
COMBINATIONS = [dict(zip(OPTIONS, values)) for values in itertools.product(*OPTIONS.values())]


def model_of(dtype=torch.float32, **options) -> GPT:
    model = GPT(GPTConfig(**{**SIZES, **options}), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # livelier weights than N(0, 0.02): the heads attend unevenly, norms have a scale
        for parameter in model.parameters():
            parameter.mul_(6 if parameter.dim() == 2 else 1).add_(0.1 if parameter.dim() == 1 else 0)
    return model.to(dtype).eval()


def name(options: dict) -> str:
    return ",".join(f"{key}={value}" for key, value in options.items())


def test_gpt2s_values_spelled_out_build_todays_model_bit_for_bit():
    today = GPT(GPTConfig(**SIZES), generator=torch.Generator().manual_seed(1)).eval()
    spelled = GPT(GPTConfig(**SIZES, position="learned", norm="layernorm", activation="gelu", n_kv_head=4,
                            window=None, mlp_hidden=64), generator=torch.Generator().manual_seed(1)).eval()
    assert list(today.state_dict()) == list(spelled.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(today.state_dict().values(), spelled.state_dict().values()))
    idx = torch.tensor([IDS])
    assert torch.equal(today(idx)[0], spelled(idx)[0])
    assert not any("alibi" in key or "rope" in key for key in today.state_dict())  # nothing new is stored


def test_old_checkpoints_describe_positions_as_a_switch(tmp_path):
    assert GPTConfig.from_dict({**SIZES, "use_position_embedding": False}).position == "none"
    assert GPTConfig.from_dict({**SIZES, "use_position_embedding": True}).position == "learned"
    with pytest.raises(ValueError, match="use_position_embedding"):
        GPTConfig.from_dict({**SIZES, "use_position_embedding": "yes"})
    model = model_of(position="none")
    folder = save(tmp_path / "old", model, CharTokenizer("abcdefghijklm"))
    config = (folder / "config.json").read_text()
    (folder / "config.json").write_text(config.replace('"position": "none"', '"use_position_embedding": false'))
    loaded, _, _ = load(folder)
    assert loaded.config.position == "none" and not loaded.config.use_position_embedding


@pytest.mark.parametrize("n_head, expected", [
    (8, [2 ** -(i + 1) for i in range(8)]),  # the paper: 1/2, 1/4, ..., 1/256
    (4, [2 ** -(2 * (i + 1)) for i in range(4)]),
    (6, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]),  # 4 of 4 heads, then every other of 8
])
def test_alibi_slopes_follow_the_paper(n_head, expected):
    assert alibi_slopes(n_head).tolist() == pytest.approx(expected, rel=1e-12)


def test_alibi_weights_fall_with_distance_by_each_heads_slope():
    model = model_of(position="alibi", n_layer=1)
    with torch.no_grad():  # every score 0: the weights are the softmax of ALiBi's penalty alone
        model.blocks[0].attn.qkv.weight[:SIZES["n_embd"]].zero_()
        model.blocks[0].attn.qkv.bias.zero_()
    with capture_attention(model) as patterns:
        model(torch.tensor([IDS]))
    weights = patterns["blocks.0.attn.hook_pattern"][0]  # (H, T, T)
    T = len(IDS)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).float()
    for head, slope in enumerate(alibi_slopes(SIZES["n_head"])):
        expected = torch.softmax((-slope * distance).masked_fill(distance < 0, float("-inf")), dim=-1)
        assert torch.allclose(weights[head], expected, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_outside_the_window_the_weights_are_exactly_zero(fused):
    model = model_of(window=3, position="rope")
    with capture_attention(model) as patterns:  # hooks take the explicit path; fused is checked below
        model(torch.tensor([IDS]))
    for weights in patterns.values():
        query, key = torch.arange(len(IDS))[:, None], torch.arange(len(IDS))[None, :]
        outside = (key > query) | (key <= query - 3)
        assert torch.all(weights[0][:, outside] == 0) and torch.all(weights[0][:, ~outside] > 0)
    if fused:  # the fused kernel gives the same outputs as the explicit path
        idx = torch.tensor([IDS])
        fused_logits = model(idx)[0]
        with model.explicit_attention():
            assert torch.allclose(fused_logits, model(idx)[0], atol=1e-5)


def test_rotary_scores_depend_on_the_distance_alone():
    q, k = torch.randn(2, 8, dtype=torch.float64).unbind()
    def score(i: int, j: int) -> float:
        return float(rotate(q[None], torch.tensor([i]), 10000.0)[0] @ rotate(k[None], torch.tensor([j]), 10000.0)[0])
    assert score(5, 2) == pytest.approx(score(105, 102), abs=1e-9)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-6)
    assert torch.allclose(rotate(q[None], torch.tensor([0]), 10000.0)[0], q)  # position 0 turns nothing


def test_grouped_queries_cache_one_key_per_group_and_save_parameters():
    full, grouped, single = (model_of(n_kv_head=n) for n in (None, 2, 1))
    cache = single.new_cache()
    single(torch.tensor([IDS[:5]]), cache=cache)
    assert cache.layers[0][0].shape == (1, 1, 5, SIZES["n_embd"] // SIZES["n_head"])  # multi-query
    attention = [model.parameter_counts()["attention"] for model in (full, grouped, single)]
    assert attention[0] > attention[1] > attention[2]
    with pytest.raises(ValueError, match="multiple of n_kv_head"):
        GPTConfig(**{**SIZES, "n_kv_head": 3})


def test_swiglu_keeps_the_parameter_count_close_to_gelus():
    gelu = GPT(GPTConfig(**{**SIZES, "n_embd": 96})).parameter_counts()["feed_forward"]
    swiglu = GPT(GPTConfig(**{**SIZES, "n_embd": 96, "activation": "swiglu"})).parameter_counts()["feed_forward"]
    assert GPTConfig(**{**SIZES, "n_embd": 96, "activation": "swiglu"}).ffn_hidden == 256  # 8/3 x 96
    assert abs(swiglu - gelu) / gelu < 0.01


@pytest.mark.parametrize("options", COMBINATIONS, ids=name)
def test_cached_decoding_equals_the_full_forward(options):
    model = model_of(torch.float64, **options)
    idx = torch.tensor([IDS])
    with torch.no_grad():
        full = model(idx)[0]
        for explicit in (False, True):
            cache = model.new_cache()
            with model.explicit_attention() if explicit else torch.no_grad():
                pieces = [model(idx[:, :5], cache=cache)[0]]  # a chunk, then one token at a time
                pieces += [model(idx[:, t:t + 1], cache=cache)[0] for t in range(5, len(IDS))]
            assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-10, rtol=0), explicit


@pytest.mark.parametrize("options", [dict(position="rope"), dict(position="alibi", window=4), dict(n_kv_head=2),
                                     dict(n_kv_head=1, position="rope", norm="rmsnorm", activation="swiglu")],
                         ids=name)
def test_head_steps_give_the_models_own_weights(options):
    model = model_of(**options)
    with capture_attention(model) as patterns:
        model(torch.tensor([IDS]))
    for layer, head, query in ((0, 1, 7), (1, 3, 11), (1, 0, 2)):
        steps = head_steps(model, IDS, layer, head, query)
        expected = patterns[f"blocks.{layer}.attn.hook_pattern"][0, head, query]
        assert torch.allclose(steps.weights, expected, atol=1e-6)


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_head_steps_show_ropes_turn_with_the_unturned_vectors(kv_heads):
    model = model_of(position="rope", n_kv_head=kv_heads)
    layer, head, query = 1, 3, 9
    steps = head_steps(model, IDS, layer, head, query)
    D = model.config.head_size
    # the unturned vectors are the layer's own projections, and turning them by position gives q and k
    assert torch.allclose(rotate(steps.q_unrotated[None], torch.tensor([query]), 10000.0)[0], steps.q, atol=1e-6)
    assert torch.allclose(rotate(steps.k_unrotated, torch.arange(len(IDS)), 10000.0), steps.k, atol=1e-6)
    assert not torch.allclose(steps.q_unrotated, steps.q) and steps.q_unrotated.shape == (D,)
    assert torch.allclose(steps.q_unrotated.norm(), steps.q.norm(), atol=1e-5)  # a turn keeps the length
    assert steps.alibi is None and steps.alibi_slope is None and steps.out_of_window == 0


def test_head_steps_show_alibis_penalty_and_the_window():
    model = model_of(position="alibi", window=4)
    layer, head, query = 0, 2, 10
    steps = head_steps(model, IDS, layer, head, query)
    slope = alibi_slopes(4)[head].item()
    distance = torch.tensor([abs(query - key) for key in range(len(IDS))], dtype=torch.float32)
    assert torch.allclose(steps.alibi, -slope * distance) and steps.alibi_slope == pytest.approx(slope)
    visible = slice(query - 3, query + 1)  # the window: the query and the 3 keys before it
    assert torch.allclose(steps.masked[visible], (steps.scaled - slope * distance)[visible])
    assert torch.isinf(steps.masked[: query - 3]).all() and steps.out_of_window == query - 3
    assert steps.q_unrotated is None and steps.k_unrotated is None
    assert head_steps(model_of(), IDS, 0, 0, 5).alibi is None  # learned positions: no penalty row


@pytest.mark.parametrize("options", [dict(position="alibi", norm="rmsnorm", activation="swiglu", n_kv_head=2,
                                          window=5)], ids=name)
def test_a_modern_model_round_trips_through_a_checkpoint(tmp_path, options):
    model = model_of(**options)
    loaded, _, _ = load(save(tmp_path / "modern", model, CharTokenizer("abcdefghijklm")))
    assert loaded.config == model.config
    idx = torch.tensor([IDS])
    assert torch.equal(loaded(idx)[0], model(idx)[0])


@pytest.mark.parametrize("field, value, message", [
    ("position", "sinusoidal", "position must be one of"), ("norm", "batchnorm", "norm must be one of"),
    ("activation", "geglu", "activation must be one of"), ("n_kv_head", 0, "n_kv_head must be"),
    ("window", -1, "window must be"), ("rope_base", math.nan, "rope_base must be"),
    ("norm_eps", 0, "norm_eps must be"), ("mlp_hidden", 2.5, "mlp_hidden must be"),
])
def test_bad_options_are_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**SIZES, field: value})
