"""Why this token (issue 23, core): direct logit attribution adds up to the logit difference, patching
restores exactly what it should, the QK circuit is the model's own score, and bad input gets messages."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from core.attribution import (LARGE_EFFECT, MAX_CIRCUIT_VOCAB, MIN_PATCH_GAP, PATCH_PARTS, circuits, head_effects,
                              logit_attribution, patch, patch_macs)
from core.config import GPTConfig
from core.interventions import head_steps
from core.model import GPT

VARIANTS = {
    "gpt": dict(),
    "nanogpt": dict(bias=False, tie_weights=True),
    "biases everywhere": dict(qkv_bias=True, lm_head_bias=True),
    "llama": dict(position="rope", norm="rmsnorm", activation="swiglu", n_kv_head=2, bias=False),
    "alibi, window, no feed-forward": dict(position="alibi", window=4, use_feed_forward=False),
}


def random_model(seed: int = 0, vocab_size: int = 30, **options) -> GPT:
    """A small model with weights far from their initialisation, so every part has something to say."""
    config = GPTConfig(vocab_size=vocab_size, n_layer=3, n_head=4, n_embd=32, block_size=16, **options)
    generator = torch.Generator().manual_seed(seed)
    model = GPT(config, generator=generator)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter += 0.3 * torch.randn(parameter.shape, generator=generator)
    return model


@pytest.mark.parametrize("options", VARIANTS.values(), ids=VARIANTS.keys())
def test_the_parts_add_up_to_the_logit_difference(options):
    model = random_model(**options)
    ids = torch.randint(30, (12,), generator=torch.Generator().manual_seed(1)).tolist()
    for position in (0, 5, -1):
        parts = logit_attribution(model, ids, position)
        total = parts.embeddings + parts.heads.sum() + parts.feed_forward.sum() + parts.biases
        assert total.item() == pytest.approx(parts.difference, abs=1e-4)
        logits = model.eval()(torch.tensor([ids]))[0][0, position]
        assert parts.target == logits.argmax().item()  # the default: the prediction against its runner-up
        assert parts.alternative == logits.topk(2).indices[1].item() and parts.difference > 0
    chosen = logit_attribution(model, ids, 3, target=7, alternative=9)
    logits = model(torch.tensor([ids]))[0][0, 3]
    assert chosen.difference == pytest.approx((logits[7] - logits[9]).item(), abs=1e-5)
    if not options.get("use_feed_forward", True):
        assert not chosen.feed_forward.any()


@pytest.mark.parametrize("options", VARIANTS.values(), ids=VARIANTS.keys())
def test_patching_restores_exactly_where_the_texts_differ(options):
    model = random_model(**options)
    clean = torch.randint(30, (10,), generator=torch.Generator().manual_seed(2)).tolist()
    corrupted = list(clean)
    corrupted[3] = (clean[3] + 1) % 30
    result = patch(model, clean, corrupted)
    assert result.residual.shape == (4, 10) and result.heads.shape == (3, 4)
    # The embeddings differ at position 3 only: patching it there is the clean run, anywhere else nothing.
    assert result.residual[0, 3].item() == pytest.approx(1, abs=1e-4)
    assert result.residual[0].abs().sum().item() == pytest.approx(1, abs=1e-4)
    assert not result.residual[:, :3].any()  # before the change both runs are the same: nothing to restore
    # After the last layer only the last position is read: patched there it is the clean run.
    assert result.residual[-1, -1].item() == pytest.approx(1, abs=1e-4)
    assert result.residual[-1, :-1].abs().max().item() < 1e-4
    # Before position 3 the two runs are the same, at every layer: nothing to restore there.
    assert result.residual[:, :3].abs().max().item() < 1e-4
    logits = model(torch.tensor([clean, corrupted]))[0][:, -1]
    assert result.clean_difference == pytest.approx((logits[0, result.target] - logits[0, result.alternative]).item(),
                                                    abs=1e-4)
    assert result.corrupted_difference == pytest.approx(
        (logits[1, result.target] - logits[1, result.alternative]).item(), abs=1e-4)


def one_pass_per_patch(model: GPT, clean: list[int], corrupted: list[int], target: int, alternative: int):
    """Patching as it is defined, and as `patch` did it before it batched: the corrupted text's own forward
    pass for every patch, one hook replacing one place of the stream (or one head's output) by the clean run's.
    Shares (L + 1, T) and (L, H) of the clean run's lead."""
    names, L, H, T = model.stream_names(), model.config.n_layer, model.config.n_head, len(clean)
    z_names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]
    clean_logits, cache = model.run_with_cache(torch.tensor([clean]), names=names + z_names)

    def lead(logits: torch.Tensor) -> float:
        return (logits[0, -1, target] - logits[0, -1, alternative]).item()

    low, high = lead(model(torch.tensor([corrupted]))[0]), lead(clean_logits)

    def share(name: str, replace) -> float:
        def hook(tensor, _hook):
            tensor = tensor.clone()
            replace(tensor, cache[name])
            return tensor
        return (lead(model.run_with_hooks(torch.tensor([corrupted]), [(name, hook)])) - low) / (high - low)

    residual, heads = torch.zeros(L + 1, T), torch.zeros(L, H)
    for row, name in enumerate(names):
        for place in range(T):
            residual[row, place] = share(name, lambda x, clean_x: x[:, place].copy_(clean_x[:, place]))
    for layer, name in enumerate(z_names):
        for head in range(H):
            heads[layer, head] = share(name, lambda z, clean_z: z[:, head].copy_(clean_z[:, head]))
    return residual, heads


@pytest.mark.parametrize("options", [*VARIANTS.values(), dict(causal=False)], ids=[*VARIANTS, "not causal"])
@pytest.mark.parametrize("batch_bytes", [1, 200_000, None], ids=["one copy a batch", "a few", "one batch a layer"])
def test_batched_patching_is_one_forward_pass_per_patch(options, batch_bytes):
    """The batched copies (from the first difference on, the positions before it read from the corrupted run)
    give what a forward pass of its own for each patch gives, whatever the batches' size."""
    model = random_model(**options).eval()
    clean = torch.randint(30, (10,), generator=torch.Generator().manual_seed(2)).tolist()
    corrupted = clean[:4] + [(clean[4] + 1) % 30] + clean[5:8] + [(clean[8] + 3) % 30] + clean[9:]
    sizes = {} if batch_bytes is None else {"batch_bytes": batch_bytes}
    result = patch(model, clean, corrupted, **sizes)
    with torch.no_grad():
        residual, heads = one_pass_per_patch(model, clean, corrupted, result.target, result.alternative)
    assert result.meaningful and heads.abs().max() > 0.05  # heads with something to restore
    assert torch.allclose(result.residual, residual, atol=1e-4), (result.residual - residual).abs().max()
    assert torch.allclose(result.heads, heads, atol=1e-4), (result.heads - heads).abs().max()


@pytest.mark.parametrize("options", [VARIANTS["gpt"], VARIANTS["llama"]], ids=["gpt", "llama"])
@pytest.mark.parametrize("first_different", [0, 4])
def test_patch_macs_bounds_the_multiply_adds_patch_does(options, first_different):
    """The server caps patching by `patch_macs`: never under what the batched copies do (PyTorch's own
    count of its matrix products), nor far over it."""
    model = random_model(**options).eval()
    clean = torch.randint(30, (10,), generator=torch.Generator().manual_seed(2)).tolist()
    corrupted = list(clean)
    corrupted[first_different] = (clean[first_different] + 1) % 30
    with FlopCounterMode(display=False) as counter:
        assert patch(model, clean, corrupted).meaningful
    done = counter.get_total_flops() // 2
    assert done <= patch_macs(model.config, len(clean), first_different) <= 1.6 * done


def test_patching_patches_the_hook_points_it_is_given():
    """`parts` names what is patched; one part gives the same numbers as both, the other left out (None)."""
    model = random_model()
    clean = torch.randint(30, (10,), generator=torch.Generator().manual_seed(2)).tolist()
    corrupted = clean[:3] + [(clean[3] + 1) % 30] + clean[4:]
    both = patch(model, clean, corrupted)
    assert set(PATCH_PARTS) == {"hook_resid_post", "hook_z"} and both.residual is not None and both.heads is not None
    heads = patch(model, clean, corrupted, parts="hook_z")
    # (batched otherwise, with or without the stream's copies beside them: equal within float rounding)
    assert heads.residual is None and torch.allclose(heads.heads, both.heads, atol=1e-5)
    stream = patch(model, clean, corrupted, parts=["hook_resid_post"])
    assert stream.heads is None and torch.allclose(stream.residual, both.residual, atol=1e-5)
    for parts in ("hook_pattern", [], ["hook_z", "blocks.0.hook_z"]):
        with pytest.raises(ValueError, match="patch parts must be some of"):
            patch(model, clean, corrupted, parts=parts)


def test_patching_draws_no_shares_of_a_gap_too_small_to_mean_anything():
    """A freshly initialised model barely tells two texts apart: a gap of thousandths of a logit, where
    each part's share would be its small effect divided by almost nothing. No shares then, and no runs."""
    model = GPT(GPTConfig(vocab_size=30, n_layer=2, n_head=4, n_embd=32, block_size=16),
                generator=torch.Generator().manual_seed(0))
    clean = list(range(10))
    corrupted = clean[:3] + [29] + clean[4:]
    calls = []
    model.blocks[1].register_forward_hook(lambda *_: calls.append(1))
    result = patch(model, clean, corrupted)
    assert 0 < abs(result.gap) < MIN_PATCH_GAP and not result.meaningful
    assert result.gap == pytest.approx(result.clean_difference - result.corrupted_difference)
    assert result.residual is None and result.heads is None
    assert len(calls) == 2  # the clean run and the corrupted one: no part was patched
    lively = patch(random_model(), clean, corrupted)  # far from its initialisation: a gap worth sharing
    assert abs(lively.gap) >= MIN_PATCH_GAP and lively.meaningful and lively.heads.shape == (3, 4)


def test_head_effects_are_patchings_shares_or_the_attributions_over_the_difference():
    model = random_model()
    clean = torch.randint(30, (10,), generator=torch.Generator().manual_seed(2)).tolist()
    corrupted = clean[:3] + [(clean[3] + 1) % 30] + clean[4:]
    patched = patch(model, clean, corrupted)
    effects = head_effects(patched)
    assert effects.method == "patching" and torch.equal(effects.shares, patched.heads)
    assert (effects.target, effects.alternative) == (patched.target, patched.alternative)
    attributed = logit_attribution(model, clean)
    direct = head_effects(attributed)
    assert direct.method == "attribution" and torch.allclose(direct.shares * attributed.difference, attributed.heads)
    assert torch.equal(direct.large(), direct.shares.abs() >= LARGE_EFFECT) and direct.large().any()
    sizes = [abs(share) for _, _, share in direct.ranked()]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == direct.large().sum()
    # no shares of almost nothing: a patching whose gap is too small, an attribution between near-equal tokens
    fresh = GPT(GPTConfig(vocab_size=30, n_layer=2, n_head=4, n_embd=32, block_size=16),
                generator=torch.Generator().manual_seed(0))
    assert head_effects(patch(fresh, list(range(10)), list(range(3)) + [29] + list(range(4, 10)))) is None
    ranked = fresh.eval()(torch.tensor([list(range(10))]))[0][0, -1].sort(descending=True).indices.tolist()
    close = logit_attribution(fresh, list(range(10)), target=ranked[1], alternative=ranked[2])
    assert abs(close.difference) < MIN_PATCH_GAP and head_effects(close) is None


def test_the_qk_circuit_is_the_heads_own_score_on_the_direct_path():
    """Without position embeddings, layer 0 reads each token's embedding alone: the QK circuit's entry for
    (query token, key token) is the head's scaled score, step by step."""
    model = random_model(position="none")
    for head in range(4):
        circuit = circuits(model, 0, head)
        assert circuit.qk.shape == (30, 30) and circuit.ov.shape == (30, 30) and circuit.positional_qk is None
        for query_token, key_token in ((3, 5), (7, 7), (29, 0)):
            steps = head_steps(model, [key_token, query_token], layer=0, head=head, query=1)
            assert circuit.qk[query_token, key_token].item() == pytest.approx(steps.scaled[0].item(), abs=1e-4)
        assert -1 <= circuit.copying_score <= 1
    assert circuits(random_model(), 1, 2).positional_qk.shape == (16, 16)


def layer0_scores(model: GPT, ids: list[int]) -> torch.Tensor:
    """Layer 0's scaled scores q.k (H, T, T) from the model's own hooks (queries and keys before RoPE turns
    them; ALiBi's penalty is added after), before the mask and the softmax."""
    seen = {}
    attn = model.blocks[0].attn
    handles = [attn.hook_q.register_forward_hook(lambda _m, _i, q: seen.__setitem__("q", q[0])),
               attn.hook_k.register_forward_hook(lambda _m, _i, k: seen.__setitem__("k", k[0]))]
    try:
        with torch.no_grad():
            model.eval()(torch.tensor([ids]))
    finally:
        for handle in handles:
            handle.remove()
    q, k = seen["q"], seen["k"].repeat_interleave(model.config.n_head // model.config.kv_heads, dim=0)
    return q @ k.transpose(-1, -2) / q.size(-1) ** 0.5


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
def test_the_qk_circuit_is_layer_zeros_score_wherever_the_tokens_stand_without_learned_positions(position):
    """What `Circuits` claims: where the stream holds the token alone, qk[a, b] is the score layer 0 gives
    query token a over key token b before its positions act, at any places in any text."""
    model = random_model(position=position, n_kv_head=2)
    ids = torch.randint(30, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    scores = layer0_scores(model, ids)  # (H, T, T)
    for head in range(4):
        qk = circuits(model, 0, head).qk
        expected = qk[torch.tensor(ids)[:, None], torch.tensor(ids)[None, :]]  # (T, T): query token x key token
        assert torch.allclose(scores[head], expected, atol=1e-4), (scores[head] - expected).abs().max()


def test_with_learned_positions_the_qk_circuit_is_not_layer_zeros_score():
    """Learned positions are added before layer 0's norm: the token circuit, the positional one, nor their sum
    is the score (the docs say so rather than claim it)."""
    model = random_model()
    ids = torch.randint(30, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    scores, tokens = layer0_scores(model, ids), torch.tensor(ids)
    for head in range(4):
        circuit = circuits(model, 0, head)
        by_token = circuit.qk[tokens[:, None], tokens[None, :]]
        assert (scores[head] - by_token).abs().max() > 1
        assert (scores[head] - by_token - circuit.positional_qk).abs().max() > 1


def test_a_head_that_copies_has_a_copying_score_near_one():
    """A one-layer model whose head writes each token's own unembedding direction: its OV circuit is
    a bright diagonal, and the negated head's score is near -1."""
    model = random_model(position="none", use_feed_forward=False, bias=False, tie_weights=True)
    config = model.config
    D = config.head_size
    with torch.no_grad():
        embedding = torch.linalg.qr(torch.randn(32, 32))[0][:30]  # (V, C) orthonormal rows: tied unembedding too
        model.token_embedding.weight.copy_(embedding)
        for block in model.blocks:
            block.ln1.weight.fill_(1)
            v_rows = slice(2 * config.n_embd, 2 * config.n_embd + D)
            block.attn.qkv.weight[v_rows] = torch.eye(32)[:D] * 5  # head 0's value: the first D channels
            block.attn.proj.weight[:, :D] = torch.eye(32)[:, :D]
        model.ln_f.weight.fill_(1)
    copying = circuits(model, 0, 0)
    assert copying.copying_score > 0.9
    with torch.no_grad():
        model.blocks[0].attn.proj.weight[:, :D] *= -1
    assert circuits(model, 0, 0).copying_score < -0.9


@pytest.mark.parametrize("call, message", [
    (lambda m: logit_attribution(m, [1, 2, 3], position=3), "position must be 0 to 2"),
    (lambda m: logit_attribution(m, [1, 2, 3], position=float("nan")), "position must be"),
    (lambda m: logit_attribution(m, [1, 2, 3], target=30), "target must be a token id from 0 to 29"),
    (lambda m: logit_attribution(m, [1, 2, 3], target=4, alternative=4), "a different token"),
    (lambda m: logit_attribution(m, [], 0), "no tokens"),
    (lambda m: logit_attribution(m, list(range(17))), "context is 16 tokens"),
    (lambda m: patch(m, [1, 2, 3], [1, 2]), "same number of tokens, got 3 and 2"),
    (lambda m: patch(m, [1, 2, 99], [1, 2, 3]), "every token of the clean text must be a token id"),
    (lambda m: patch(m, [1, 2, 3], [1, 2, 3]), "nothing to restore"),
    (lambda m: patch(m, [1, 2, 3], [1, 2, 4], alternative=-1), "alternative must be a token id"),
    (lambda m: circuits(m, 3, 0), "layer must be 0 to 2"),
    (lambda m: circuits(m, 0, 4), "head must be 0 to 3"),
])
def test_bad_requests_get_a_message_naming_the_field(call, message):
    model = random_model()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        call(model)
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())  # nothing touched
    assert not any(point.active for point in model.hook_points().values())  # no hook left behind


def test_models_these_do_not_apply_to_say_why():
    with pytest.raises(ValueError, match="no residual stream"):
        logit_attribution(GPT(GPTConfig(vocab_size=10, n_layer=1, n_head=1, n_embd=8, block_size=4,
                                        use_residual=False)), [1, 2])
    with pytest.raises(ValueError, match=f"at most {MAX_CIRCUIT_VOCAB} tokens; this model has 600"):
        circuits(random_model(vocab_size=600), 0, 0)
