import pytest
import torch

from core import GPT, STAGES, GPTConfig, capture_attention, stage_config
from core.config import stage_of


def small_config(**overrides) -> GPTConfig:
    return GPTConfig(**{**dict(vocab_size=17, block_size=24, n_layer=3, n_head=4, n_embd=32), **overrides})


# ---------------------------------------------------------------- parameter counts (the seeds' figures)


def test_lecture_model_has_the_seed_parameter_count():
    cfg = GPTConfig(vocab_size=65, block_size=256, n_layer=3, n_head=8, n_embd=384,
                    bias=True, qkv_bias=False, activation="relu", tie_weights=False)
    assert GPT(cfg).parameter_counts()["total"] == 5_468_993


def test_gpt2_124m_shape_component_counts():
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                    qkv_bias=False, lm_head_bias=False, tie_weights=False)
    with torch.device("meta"):  # shapes only: no 163M parameters to initialise
        counts = GPT(cfg).parameter_counts()
    assert counts["token_embedding"] == 38_597_376
    assert counts["position_embedding"] == 786_432
    assert counts["blocks"] == 85_026_816
    assert counts["lm_head"] == 38_597_376
    assert counts["attention"] == 28_320_768
    assert counts["feed_forward"] == 56_669_184
    parts = ("token_embedding", "position_embedding", "blocks", "final_layer_norm", "lm_head")
    assert counts["total"] == sum(counts[p] for p in parts)


def test_tied_head_is_counted_once():
    untied = GPT(small_config(lm_head_bias=False)).parameter_counts()
    tied_model = GPT(small_config(lm_head_bias=False, tie_weights=True))
    tied = tied_model.parameter_counts()
    assert tied_model.lm_head.weight is tied_model.token_embedding.weight
    assert tied["lm_head"] == 0
    assert tied["total"] == untied["total"] - 17 * 32


# ---------------------------------------------------------------- config validation


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(n_embd=30, n_head=4), "n_embd"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(block_size=0), "block_size"),
        (dict(n_head=-2), "n_head"),
        (dict(n_layer=-1), "n_layer"),
        (dict(activation="swish"), "activation"),
        (dict(dropout=1.5), "dropout"),
        (dict(n_embd=2.5), "n_embd"),
    ],
)
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        small_config(**overrides)


def test_config_round_trips_through_a_dict():
    cfg = small_config(activation="relu", tie_weights=True)
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown"):
        GPTConfig.from_dict({**cfg.to_dict(), "n_expert": 8})


# ---------------------------------------------------------------- forward, loss, context


def test_forward_shapes_and_loss():
    model = GPT(small_config())
    idx = torch.randint(17, (2, 24))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 24, 17)
    # an untrained model predicts close to uniform: loss near ln(vocab)
    assert abs(loss.item() - torch.log(torch.tensor(17.0)).item()) < 0.3
    assert model(idx)[1] is None
    last, _ = model.eval()(idx, last_only=True)  # the next token's logits alone
    assert last.shape == (2, 1, 17) and torch.allclose(last, model(idx)[0][:, -1:], atol=1e-6)


def test_sequence_longer_than_the_context_is_refused_where_positions_are_learned():
    model = GPT(small_config())
    with pytest.raises(ValueError, match="context is 24 tokens"):
        model(torch.zeros(1, 25, dtype=torch.long))
    for position in ("rope", "alibi", "none"):  # computed (or no) positions read on
        logits, _ = GPT(small_config(position=position))(torch.zeros(1, 40, dtype=torch.long))
        assert logits.shape[1] == 40 and torch.isfinite(logits).all()


# ---------------------------------------------------------------- attention capture


def test_captured_and_fused_paths_agree_and_weights_are_causal():
    model = GPT(small_config()).eval()
    idx = torch.randint(17, (3, 20))
    fused, _ = model(idx)
    captured, _, attentions = model(idx, return_attention=True)
    assert torch.allclose(fused, captured, atol=1e-5)
    assert len(attentions) == 3
    for weights in attentions:
        assert weights.shape == (3, 4, 20, 20)
        assert torch.allclose(weights.sum(-1), torch.ones(3, 4, 20), atol=1e-5)
        upper = torch.triu(torch.ones(20, 20, dtype=torch.bool), diagonal=1)
        assert (weights[..., upper] == 0).all()  # exactly zero, not just small


def test_capture_is_off_unless_asked():
    model = GPT(small_config()).eval()
    idx = torch.randint(17, (1, 10))
    with capture_attention(model) as patterns:
        model(idx)
    assert list(patterns) == [f"blocks.{i}.attn.hook_pattern" for i in range(3)]
    assert not any(h.active for h in model.hook_points().values())  # hooks removed on exit


def test_hook_points_can_change_the_pattern():
    """Named hook points are real intervention points, not only read-outs."""
    model = GPT(small_config(n_layer=1)).eval()
    idx = torch.randint(17, (1, 8))
    base, _ = model(idx)

    def attend_to_first_token(_module, _inputs, weights):
        uniform = torch.zeros_like(weights)
        uniform[..., 0] = 1.0
        return uniform

    handle = model.hook_points()["blocks.0.attn.hook_pattern"].register_forward_hook(attend_to_first_token)
    try:
        changed, _ = model(idx)
    finally:
        handle.remove()
    assert not torch.allclose(base, changed)
    assert torch.allclose(changed[0, 0], base[0, 0], atol=1e-5)  # position 0 only ever sees itself


# ---------------------------------------------------------------- KV cache


def test_cache_gives_the_logits_of_a_full_forward():
    model = GPT(small_config()).eval()
    idx = torch.randint(17, (2, 20))
    full, _ = model(idx)
    cache = model.new_cache()
    chunks = [model(idx[:, :7], cache=cache)[0]] + [model(idx[:, t : t + 1], cache=cache)[0] for t in range(7, 20)]
    assert torch.allclose(torch.cat(chunks, dim=1), full, atol=1e-5)
    with pytest.raises(ValueError, match="this model.s context is 24 tokens"):
        model(idx[:, :5], cache=cache)  # 20 cached + 5 > block_size 24


def test_explicit_attention_with_a_cache_matches_the_fused_full_forward():
    model = GPT(small_config()).eval()
    idx = torch.randint(17, (2, 20))
    full, _ = model(idx)
    cache = model.new_cache()
    with model.explicit_attention():  # chunks after a non-empty cache need the offset mask
        chunks = [model(idx[:, a:b], cache=cache)[0] for a, b in ((0, 7), (7, 12), (12, 13), (13, 20))]
    assert torch.allclose(torch.cat(chunks, dim=1), full, atol=1e-5)


# ---------------------------------------------------------------- the seeds' progression


def test_every_stage_builds_trains_and_has_its_parts():
    idx = torch.randint(17, (2, 16))
    sizes = {}
    for stage in STAGES:
        model = GPT(stage_config(stage, vocab_size=17, block_size=16, n_layer=2, n_head=4, n_embd=32))
        logits, loss = model(idx, idx)
        loss.backward()
        assert logits.shape == (2, 16, 17)
        counts = model.parameter_counts()
        sizes[stage] = counts["total"]
        assert (counts["position_embedding"] > 0) == (stage != "bigram")
        assert (counts["attention"] > 0) == (stage not in ("bigram", "positions"))
        assert (counts["feed_forward"] > 0) == (stage in ("feed_forward", "gpt"))
        assert STAGES[stage].title and STAGES[stage].description
        # the lecture's early stages: one layer at PyTorch's initialisation; the GPT keeps the sizes given
        assert len(model.blocks) == (2 if stage == "gpt" else int(counts["blocks"] > 0))
    assert stage_config("one_head", vocab_size=17).n_head == 1
    # each stage adds parameters to the last (one head and many heads have the same count)
    order = list(STAGES)
    assert all(sizes[a] <= sizes[b] for a, b in zip(order, order[1:]))
    assert sizes["bigram"] < sizes["positions"] < sizes["one_head"] < sizes["feed_forward"] < sizes["gpt"]


def test_every_stage_starts_with_a_signal_to_learn_from():
    """Without residual connections GPT-2's N(0, 0.02) weights shrink the signal about 50-fold per
    linear layer: logits at initialisation were ~1e-10 apart and the feed-forward stage never learned.
    The early stages use PyTorch's initialisation, as the lecture does."""
    idx = torch.randint(65, (4, 32))
    for stage in STAGES:
        model = GPT(stage_config(stage, vocab_size=65, block_size=32, n_layer=4, n_head=4, n_embd=128))
        assert model(idx)[0].std() > 1e-2, stage
    starved = GPT(GPTConfig(**{**stage_config("feed_forward", vocab_size=65, block_size=32, n_embd=128).to_dict(),
                               "init": "gpt2"}))
    assert starved(idx)[0].std() < 1e-4


def test_pytorch_initialisation_is_drawn_from_the_generator():
    config = stage_config("feed_forward", vocab_size=11, block_size=8, n_head=2, n_embd=16)
    torch.manual_seed(1)
    a = GPT(config, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(2)
    b = GPT(config, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    bound = 1 / 16**0.5  # nn.Linear's own default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    weight = a.blocks[0].attn.qkv.weight
    assert weight.abs().max() <= bound and weight.std() > 0.8 * bound / 3**0.5
    assert 0.8 < a.token_embedding.weight.std() < 1.2  # nn.Embedding's default N(0, 1)


def test_stage_of_names_each_stage_and_nothing_else():
    for stage in STAGES:
        assert stage_of(stage_config(stage, vocab_size=5, n_head=4)) == stage
    assert stage_of(stage_config("multi_head", vocab_size=5, n_head=1)) == "one_head"
    assert stage_of(GPTConfig(vocab_size=5, use_residual=False)) is None  # four layers, GPT-2 init: a custom mix
    with pytest.raises(ValueError, match="init"):
        GPTConfig(init="xavier")


def test_bigram_stage_ignores_context():
    model = GPT(stage_config("bigram", vocab_size=17, block_size=16, n_embd=32)).eval()
    a = model(torch.tensor([[3, 5, 7]]))[0]
    b = model(torch.tensor([[9, 1, 7]]))[0]
    assert torch.allclose(a[0, -1], b[0, -1])  # only the last token matters


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="stage"):
        stage_config("transformer-xl")


def test_a_seeded_generator_gives_the_same_weights_whatever_the_global_rng():
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    torch.manual_seed(1)
    a = GPT(config, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(2)
    b = GPT(config, generator=torch.Generator().manual_seed(5))
    c = GPT(config, generator=torch.Generator().manual_seed(6))
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    assert not torch.equal(a.token_embedding.weight, c.token_embedding.weight)
    # the projections into the residual stream are drawn narrower, as in GPT-2
    assert a.blocks[0].attn.proj.weight.std() < 0.7 * a.blocks[0].attn.qkv.weight.std()


# ---------------------------------------------------------------- break-it switches


def test_without_the_causal_mask_a_position_sees_the_future():
    config = dict(vocab_size=17, block_size=16, n_layer=2, n_head=4, n_embd=32)
    idx = torch.randint(17, (1, 12))
    later = idx.clone()
    later[0, 9] = (later[0, 9] + 1) % 17  # change one later token
    for causal in (True, False):
        model = GPT(GPTConfig(**config, causal=causal), generator=torch.Generator().manual_seed(0)).eval()
        changed = not torch.allclose(model(idx)[0][0, 4], model(later)[0][0, 4])
        assert changed == (not causal)  # position 4's logits move only when it can see position 9
        _, _, patterns = model(idx, return_attention=True)
        upper = patterns[0][0].triu(diagonal=1)  # weights on keys after the query
        assert (upper.abs().max() > 0) == (not causal)
        # the fused path (nobody looking) and the explicit path agree
        assert torch.allclose(model(idx)[0], model(idx, return_attention=True)[0], atol=1e-5)


def test_without_scaling_the_scores_are_not_divided_by_sqrt_d():
    config = dict(vocab_size=17, block_size=16, n_layer=1, n_head=2, n_embd=32)
    idx = torch.randint(17, (1, 10))
    scaled = GPT(GPTConfig(**config), generator=torch.Generator().manual_seed(1)).eval()
    raw = GPT(GPTConfig(**config, scale_attention=False), generator=torch.Generator().manual_seed(1)).eval()
    attn = scaled.blocks[0].attn
    x = scaled.blocks[0].ln1(scaled.token_embedding(idx) + scaled.position_embedding(torch.arange(10)))
    q, k, _ = attn.qkv(x).split(32, dim=2)
    q, k = (t.view(1, 10, 2, 16).transpose(1, 2) for t in (q, k))
    scores = (q @ k.transpose(-2, -1)).masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    for model, divide in ((scaled, 16**0.5), (raw, 1.0)):
        _, _, patterns = model(idx, return_attention=True)
        assert torch.allclose(patterns[0], torch.softmax(scores / divide, -1), atol=1e-6)
        assert torch.allclose(model(idx)[0], model(idx, return_attention=True)[0], atol=1e-5)


def test_switches_must_be_booleans():
    with pytest.raises(ValueError, match="causal must be True or False"):
        GPTConfig(causal="no")


def test_without_position_embeddings_the_model_reads_a_bag_of_tokens():
    """In one layer the last position's prediction depends on which tokens came before, not on their
    order. (Deeper, the causal mask itself leaks order: an earlier token's state depends on its prefix.)"""
    config = dict(vocab_size=17, block_size=16, n_layer=1, n_head=4, n_embd=32)
    idx = torch.tensor([[3, 9, 4, 1, 7, 5]])
    shuffled = torch.tensor([[7, 1, 9, 3, 4, 5]])  # the same tokens before the same last one
    for positions in (True, False):
        model = GPT(GPTConfig(**config, position="learned" if positions else "none"),
                    generator=torch.Generator().manual_seed(0)).eval()
        same = torch.allclose(model(idx)[0][0, -1], model(shuffled)[0][0, -1], atol=1e-5)
        assert same == (not positions)
