"""Inside a trained head: the attention arithmetic step by step, knock-outs, the logit lens."""

import math

import pytest
import torch

from core.interventions import ablate, head_importance, head_steps, logit_lens, text_loss
from core.sample import generate
from core.config import GPTConfig
from core.model import GPT

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]


def model_of(**fields) -> GPT:
    config = dict(vocab_size=11, block_size=16, n_layer=3, n_head=4, n_embd=32)
    model = GPT(GPTConfig(**{**config, **fields}), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # livelier weights than N(0, 0.02), so the heads attend unevenly
        for parameter in model.parameters():
            parameter.mul_(8 if parameter.dim() == 2 else 1)
    return model.eval()


def own_attention(model: GPT, ids: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The model's own weights and per-head outputs, read at its hook points: two lists of (H, T, ...)."""
    outputs = []
    handles = [block.attn.hook_z.register_forward_hook(lambda _m, _i, z: outputs.append(z[0]))
               for block in model.blocks]
    _, _, patterns = model(torch.tensor([ids]), return_attention=True)
    for handle in handles:
        handle.remove()
    return [p[0] for p in patterns], outputs


def test_step_by_step_equals_the_models_own_weights_and_output():
    model = model_of()
    patterns, outputs = own_attention(model, IDS)
    for layer, head, query in [(0, 0, 0), (0, 3, 7), (1, 2, 15), (2, 1, 9)]:
        steps = head_steps(model, IDS, layer, head, query)
        assert torch.allclose(steps.weights, patterns[layer][head, query], atol=1e-6, rtol=0)
        assert torch.allclose(steps.output, outputs[layer][head, query], atol=1e-6, rtol=0)
        # every step follows from the one before
        D = model.config.head_size
        assert torch.allclose(steps.scores, steps.k @ steps.q) and torch.allclose(steps.scaled, steps.scores / D**0.5)
        assert torch.isinf(steps.masked[query + 1:]).all() and torch.equal(steps.masked[: query + 1],
                                                                          steps.scaled[: query + 1])
        assert torch.allclose(steps.weighted.sum(0), steps.output)
        assert steps.weights[query + 1:].sum() == 0 and math.isclose(steps.weights.sum().item(), 1, abs_tol=1e-6)


def test_the_toggles_show_what_the_weights_would_be():
    steps = head_steps(model_of(), IDS, 1, 0, 10)
    # without sqrt(d) the scores are D**0.5 times larger: a sharper, more saturated softmax
    entropy = lambda w: -(w[w > 0] * w[w > 0].log()).sum().item()  # noqa: E731
    assert entropy(steps.weights_unscaled) < entropy(steps.weights)
    assert steps.weights_unmasked[11:].sum() > 0  # without the mask it sees the future
    assert torch.allclose(steps.weights_unmasked, torch.softmax(steps.scaled, -1))
    plain = steps.to_dict()
    assert plain["masked"][11] is None and len(plain["k"]) == len(IDS) and plain["query"] == 10


def test_head_steps_refuses_what_is_not_there():
    model = model_of()
    for layer, head, query in [(3, 0, 0), (0, 4, 0), (0, 0, 16), (-1, 0, 0), (0, 0, True)]:
        with pytest.raises(ValueError, match="layer|head|query"):
            head_steps(model, IDS, layer, head, query)
    with pytest.raises(ValueError, match="context"):
        head_steps(model, IDS * 2, 0, 0, 0)


def test_every_head_of_a_layer_off_equals_removing_that_layers_attention():
    model = model_of(bias=False, qkv_bias=False)
    idx = torch.tensor([IDS])
    with ablate(model, [(1, h) for h in range(4)]):
        ablated, _ = model(idx)
    attention, model.blocks[1].attn = model.blocks[1].attn, None  # the block without its attention
    removed, _ = model(idx)
    model.blocks[1].attn = attention
    assert torch.allclose(ablated, removed, atol=1e-6)
    assert not torch.allclose(ablated, model(idx)[0], atol=1e-3)  # and the knock-out ends with the block


def test_with_biases_every_head_off_leaves_only_the_projections_bias():
    model = model_of()
    idx = torch.tensor([IDS])
    with ablate(model, [(2, h) for h in range(4)]):
        ablated, _ = model(idx)
    attention = model.blocks[2].attn
    handle = attention.register_forward_hook(lambda m, _inputs, out: torch.zeros_like(out) + m.proj.bias)
    bias_only, _ = model(idx)
    handle.remove()
    assert torch.allclose(ablated, bias_only, atol=1e-6)


def test_knocking_out_a_head_changes_the_loss_and_mean_ablation_differs_from_zeroing():
    model = model_of()
    idx, targets = torch.tensor([IDS[:-1]]), torch.tensor([IDS[1:]])
    base = model(idx, targets)[1].item()
    with ablate(model, [(0, 2)]):
        zeroed = model(idx, targets)[1].item()
    with ablate(model, [(0, 2)], mode="mean"):
        averaged = model(idx, targets)[1].item()
    assert len({base, zeroed, averaged}) == 3
    for bad in ([(0, 9)], [(5, 0)], [0], [(0, 1, 2)]):
        with pytest.raises(ValueError):
            with ablate(model, bad):
                pass
    with pytest.raises(ValueError, match="mode"):
        with ablate(model, [(0, 0)], mode="half"):
            pass


def test_the_logit_lens_last_depth_is_the_models_own_prediction():
    model = model_of()
    lens = logit_lens(model, IDS, top_k=3)
    assert lens.depths == ["embeddings", "layer 0", "layer 1", "layer 2"]
    assert lens.top_ids.shape == (4, 16, 3) and lens.target_probs.shape == (4, 15)
    probs = torch.softmax(model(torch.tensor([IDS]))[0][0], -1)  # (T, V)
    best = probs.topk(3, -1)
    assert torch.equal(lens.top_ids[-1], best.indices)
    assert torch.allclose(lens.top_probs[-1], best.values, atol=1e-6)
    true = probs[:-1].gather(1, torch.tensor(IDS[1:])[:, None])[:, 0]
    assert torch.allclose(lens.target_probs[-1], true, atol=1e-6)
    assert torch.equal(lens.target_ranks[-1], (probs[:-1] > true[:, None]).sum(-1))
    # without position embeddings the first row reads the token alone: token 1 at positions 1 and 3
    blind = logit_lens(model_of(position="none"), IDS)
    assert torch.equal(blind.top_ids[0, 1], blind.top_ids[0, 3])
    assert torch.equal(blind.top_probs[0, 1], blind.top_probs[0, 3])


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_importance_of_every_head_at_once_equals_one_knock_out_at_a_time(mode):
    model = model_of()
    importance = head_importance(model, IDS, mode)
    idx, targets = torch.tensor([IDS[:-1]]), torch.tensor([IDS[1:]])
    base = model(idx, targets)[1]
    assert importance.shape == (3, 4)
    for layer in range(3):
        for head in range(4):
            with ablate(model, [(layer, head)], mode):
                alone = model(idx, targets)[1]
            assert math.isclose(importance[layer, head].item(), (alone - base).item(), abs_tol=1e-5)
    assert importance.abs().max() > 1e-3  # the heads matter to this model


def test_importance_in_chunks_is_the_same(monkeypatch):
    model = model_of()
    whole = head_importance(model, IDS)
    monkeypatch.setattr("core.interventions.LOGITS_PER_CHUNK", 3 * len(IDS) * 11)  # three of the four heads per chunk
    assert torch.allclose(head_importance(model, IDS), whole, atol=1e-6)


@pytest.mark.parametrize("switch", ["causal", "scale_attention"])
def test_step_by_step_follows_a_model_built_without_the_mask_or_the_scaling(switch):
    model = model_of(**{switch: False})
    patterns, outputs = own_attention(model, IDS)
    steps = head_steps(model, IDS, 1, 2, 6)
    assert torch.allclose(steps.weights, patterns[1][2, 6], atol=1e-6, rtol=0)
    assert torch.allclose(steps.output, outputs[1][2, 6], atol=1e-6, rtol=0)


def test_mean_ablation_over_a_text_holds_its_means_fixed_and_matches_the_per_pass_mean_there():
    model = model_of()
    idx, targets = torch.tensor([IDS[:-1]]), torch.tensor([IDS[1:]])
    with ablate(model, [(1, 1), (2, 3)], "mean"):
        per_pass = model(idx, targets)[1]
    with ablate(model, [(1, 1), (2, 3)], "mean", over=IDS[:-1]):
        fixed = model(idx, targets)[1]
        # fixed means do not depend on the window: a cached generation sees the same numbers
        cached = generate(model, torch.tensor([IDS[:4]]), 8, temperature=0)
        assert torch.equal(cached, generate(model, torch.tensor([IDS[:4]]), 8, temperature=0, use_cache=False))
    # layer 1's mean is the same either way; layer 2's differs only because layer 1 was already off
    # in the per-pass run: with one layer knocked out, the two agree exactly
    with ablate(model, [(1, 1)], "mean"):
        one_per_pass = model(idx, targets)[1]
    with ablate(model, [(1, 1)], "mean", over=IDS[:-1]):
        one_fixed = model(idx, targets)[1]
    assert torch.allclose(one_per_pass, one_fixed, atol=1e-6) and torch.isfinite(per_pass) and torch.isfinite(fixed)
    assert math.isclose(text_loss(model, IDS), model(idx, targets)[1].item(), rel_tol=1e-6)
