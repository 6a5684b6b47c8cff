"""The one hook API (`core.hooks`, on `core.model.GPT`): hooks leave with their `with` block, the cache holds
the documented shapes, a returned tensor replaces the one that passed, unknown names are refused, nothing
looks without a hook, and no other module registers PyTorch hooks."""

import re
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from core.config import GPTConfig
from core.model import GPT

ROOT = Path(__file__).resolve().parent.parent
HOOK_API = ROOT / "core" / "hooks.py"
B, T, C, H, KV, D = 2, 9, 32, 4, 2, 8


@pytest.fixture
def model() -> GPT:
    # grouped queries (KV < H), so the keys' documented shape differs from the queries'
    config = GPTConfig(vocab_size=17, block_size=16, n_layer=2, n_head=H, n_kv_head=KV, n_embd=C)
    return GPT(config, torch.Generator().manual_seed(0)).eval()


@pytest.fixture
def idx() -> torch.Tensor:
    return torch.randint(17, (B, T), generator=torch.Generator().manual_seed(1))


def hooked(model: GPT) -> list[str]:
    return [name for name, point in model.hook_points().items() if point.active]


def test_hooks_are_attached_inside_the_block_and_removed_after_it(model, idx):
    calls = []
    with model.hooks([("blocks.1.hook_resid_post", lambda x, hook: calls.append(hook.name)),
                      (lambda name: name.endswith("attn.hook_z"), lambda z, hook: calls.append(hook.name))]):
        assert hooked(model) == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z", "blocks.1.hook_resid_post"]
        model(idx)
    assert calls == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z", "blocks.1.hook_resid_post"]
    assert hooked(model) == []
    model(idx)
    assert len(calls) == 3  # not called once the block has ended


def test_hooks_are_removed_when_the_block_raises(model, idx):
    with pytest.raises(RuntimeError, match="boom"):
        with model.hooks([("hook_embed", lambda x, hook: None)]):
            assert hooked(model) == ["hook_embed"]
            raise RuntimeError("boom")
    assert hooked(model) == []

    def failing(x, hook):
        raise RuntimeError("inside the forward pass")

    with pytest.raises(RuntimeError, match="inside the forward pass"):
        model.run_with_hooks(idx, fwd_hooks=[("blocks.0.hook_mlp_out", failing)])
    assert hooked(model) == []
    with pytest.raises(RuntimeError, match="inside the forward pass"):
        with model.caching(["hook_embed"]), model.hooks([("blocks.0.attn.hook_q", failing)]):
            model(idx)
    assert hooked(model) == []


def test_run_with_cache_holds_every_hook_point_with_its_documented_shape(model, idx):
    logits, cache = model.run_with_cache(idx)
    assert torch.allclose(logits, model(idx)[0], atol=1e-5)  # explicit attention, where the plain run fuses
    shapes = {"hook_embed": (B, T, C)}
    for i in range(2):
        shapes |= {f"blocks.{i}.attn.hook_q": (B, H, T, D), f"blocks.{i}.attn.hook_k": (B, KV, T, D),
                   f"blocks.{i}.attn.hook_pattern": (B, H, T, T), f"blocks.{i}.attn.hook_z": (B, H, T, D),
                   f"blocks.{i}.hook_attn_out": (B, T, C), f"blocks.{i}.hook_mlp_out": (B, T, C),
                   f"blocks.{i}.hook_resid_post": (B, T, C)}
    assert {name: tuple(tensor.shape) for name, tensor in cache.items()} == shapes
    assert list(cache) == list(model.hook_points())  # in the order the forward pass meets them
    assert not any(tensor.requires_grad for tensor in cache.values())
    assert torch.allclose(model.ln_f(cache["blocks.1.hook_resid_post"]) @ model.lm_head.weight.T
                          + model.lm_head.bias, logits, atol=1e-5)
    _, only = model.run_with_cache(idx, names=["blocks.0.attn.hook_pattern", "hook_embed"])
    assert list(only) == ["hook_embed", "blocks.0.attn.hook_pattern"]
    assert torch.equal(only["blocks.0.attn.hook_pattern"], cache["blocks.0.attn.hook_pattern"])
    assert hooked(model) == []


def test_a_returned_tensor_replaces_the_one_that_passed_and_none_leaves_it(model, idx):
    with model.explicit_attention():  # the path a hook on attention takes, so equal means equal
        plain = model(idx)[0]
    seen = model.run_with_hooks(idx, fwd_hooks=[(lambda name: name.endswith("hook_z"), lambda z, hook: None)])
    assert torch.equal(seen, plain)
    silenced = model.run_with_hooks(idx, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, hook: torch.zeros_like(z))])
    assert hooked(model) == []
    assert not torch.allclose(silenced, plain)
    # every head of layer 0 silenced leaves only the projection's bias: the same as zeroing what attention adds
    bias_only = model.run_with_hooks(idx, fwd_hooks=[
        ("blocks.0.hook_attn_out", lambda out, hook: model.blocks[0].attn.proj.bias.expand_as(out))])
    assert torch.allclose(silenced, bias_only, atol=1e-5)


def test_a_name_that_is_no_hook_point_is_refused_with_the_valid_names(model, idx):
    for call in (lambda: model.hooks([("blocks.0.attn.hook_zz", lambda x, hook: None)]).__enter__(),
                 lambda: model.run_with_cache(idx, names=["hook_embed", "blocks.9.hook_resid_post"]),
                 lambda: model.run_with_hooks(idx, fwd_hooks=[("blocks.0.attn", lambda x, hook: None)])):
        with pytest.raises(ValueError, match="no hook point named") as refused:
            call()
        assert "blocks.1.attn.hook_pattern" in str(refused.value) and "hook_embed" in str(refused.value)
    assert hooked(model) == []


def test_without_a_hook_on_attention_it_stays_fused(model, idx, monkeypatch):
    """Hook points cost nothing unused: attention keeps the fused kernel unless its weights or head outputs
    are looked at (caching the stream does not count)."""
    fused = []
    kernel = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: fused.append(1) or kernel(*a, **k))
    model(idx)
    model.run_with_cache(idx, names=lambda name: "resid" in name or "hook_q" in name)
    assert len(fused) == 4  # two layers, two runs
    model.run_with_cache(idx, names="blocks.1.attn.hook_pattern")
    assert len(fused) == 5  # layer 0 fused, layer 1 explicit: its weights pass the hook point


def test_no_module_but_the_hook_api_registers_pytorch_hooks():
    """Every look inside a model goes through `core.hooks`: a hook registered anywhere else would bypass its
    removal on exit and its checked names."""
    registering = re.compile(r"\b(register_\w*hook|register_module_\w+_hook)\b")
    offenders = [str(path.relative_to(ROOT)) for package in ("core", "playground")
                 for path in sorted((ROOT / package).rglob("*.py"))
                 if path != HOOK_API and registering.search(path.read_text(encoding="utf-8"))]
    assert offenders == []
    assert registering.search(HOOK_API.read_text(encoding="utf-8"))  # the pattern does find a registration


def test_no_core_module_imports_another_ones_private_names():
    """Checks shared between analyses are public (`core.checks`), not borrowed underscored names."""
    private = re.compile(r"^from core\.\w+ import .*\b_\w+", re.MULTILINE)
    assert [path.name for path in sorted((ROOT / "core").glob("*.py")) if private.search(path.read_text())] == []
