"""An outside reference for "why this token" (issue 23): the field's own tool, TransformerLens, given
the weights of a model trained here, computes the same logits, the same direct logit attributions
and the same activation patching as `core.attribution` (within 1e-4 in float32); and our QK circuit
differs from its convention exactly as `core.attribution.Circuits` says.

TransformerLens is a test-only dependency (requirements-test.txt), as transformers is.
"""

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig, patching

from core.attribution import circuits, logit_attribution, patch
from core.config import GPTConfig
from core.model import GPT

WORD = 6  # the copy task: 6 random letters, "|", the same 6 again
VOCAB = 12  # 11 letters and "|"


def copy_batch(generator: torch.Generator, n: int = 32) -> torch.Tensor:
    words = torch.randint(VOCAB - 1, (n, WORD), generator=generator)
    return torch.cat([words, torch.full((n, 1), VOCAB - 1), words], dim=1)  # (n, 13)


@pytest.fixture(scope="module")
def trained() -> GPT:
    """Two layers of 4 heads with every bias, trained 150 steps to copy (a second or two)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, n_layer=2, n_head=4, n_embd=32, block_size=16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        batch = copy_batch(generator)
        _, loss = model(batch[:, :-1], batch[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def hooked(model: GPT) -> HookedTransformer:
    """The same weights in a HookedTransformer, mapped by hand (TransformerLens keeps each head's
    matrices apart: W_Q (H, C, D), W_O (H, D, C); ours are fused (out, in) Linear weights)."""
    config = model.config
    C, H, D = config.n_embd, config.n_head, config.head_size
    reference = HookedTransformer(HookedTransformerConfig(
        n_layers=config.n_layer, d_model=C, n_ctx=config.block_size, d_head=D, n_heads=H,
        d_mlp=model.blocks[0].mlp.fc.out_features, d_vocab=config.vocab_size, act_fn="gelu",
        normalization_type="LN", eps=config.norm_eps, positional_embedding_type="standard",
        default_prepend_bos=False, seed=0))

    def heads_in(weight: torch.Tensor) -> torch.Tensor:  # (H D, C) -> (H, C, D)
        return weight.view(H, D, C).transpose(1, 2)

    state = {"embed.W_E": model.token_embedding.weight, "pos_embed.W_pos": model.position_embedding.weight,
             "ln_final.w": model.ln_f.weight, "ln_final.b": model.ln_f.bias,
             "unembed.W_U": model.lm_head.weight.T, "unembed.b_U": model.lm_head.bias}
    for layer, block in enumerate(model.blocks):
        q, k, v = block.attn.qkv.weight.split(C)
        q_bias, k_bias, v_bias = block.attn.qkv.bias.split(C)
        prefix = f"blocks.{layer}."
        state.update({
            prefix + "ln1.w": block.ln1.weight, prefix + "ln1.b": block.ln1.bias,
            prefix + "ln2.w": block.ln2.weight, prefix + "ln2.b": block.ln2.bias,
            prefix + "attn.W_Q": heads_in(q), prefix + "attn.W_K": heads_in(k), prefix + "attn.W_V": heads_in(v),
            prefix + "attn.b_Q": q_bias.view(H, D), prefix + "attn.b_K": k_bias.view(H, D),
            prefix + "attn.b_V": v_bias.view(H, D),
            prefix + "attn.W_O": block.attn.proj.weight.T.reshape(H, D, C), prefix + "attn.b_O": block.attn.proj.bias,
            prefix + "mlp.W_in": block.mlp.fc.weight.T, prefix + "mlp.b_in": block.mlp.fc.bias,
            prefix + "mlp.W_out": block.mlp.proj.weight.T, prefix + "mlp.b_out": block.mlp.proj.bias,
        })
    missing, _ = reference.load_state_dict({name: value.detach().clone() for name, value in state.items()},
                                           strict=False)
    assert not [name for name in missing if not name.endswith(("IGNORE", ".mask"))], missing
    return reference.eval()


TEXTS = [[3, 1, 4, 1, 5, 9, 11, 3, 1, 4, 1, 5], [2, 7, 1, 8, 2, 8, 11, 2, 7, 1, 8, 2]]


@pytest.mark.parametrize("ids", TEXTS)
def test_transformer_lens_computes_our_logits(trained, ids):
    ours = trained(torch.tensor([ids]))[0]
    theirs = hooked(trained)(torch.tensor([ids]))
    assert torch.allclose(ours, theirs, atol=1e-4), (ours - theirs).abs().max()


@pytest.mark.parametrize("ids", TEXTS)
@pytest.mark.parametrize("position", [6, 9, -1])
def test_direct_logit_attributions_match_transformer_lens(trained, ids, position):
    ours = logit_attribution(trained, ids, position)
    reference = hooked(trained)
    tokens = torch.tensor([ids])
    _, cache = reference.run_with_cache(tokens)
    # TransformerLens's logit_attrs reads the unembedding alone: fold the final LayerNorm's weight and bias
    # into it (its fold_ln), as its own loaders do; its scale stays frozen at the cached value.
    reference.process_weights_(fold_ln=True, center_writing_weights=False, center_unembed=False)

    def attributed(stack: torch.Tensor) -> torch.Tensor:  # (parts, 1, T, C) -> (parts,)
        return cache.logit_attrs(stack[:, :, position], tokens=torch.tensor([ours.target]), incorrect_tokens=torch.tensor(
            [ours.alternative]), pos_slice=position, has_batch_dim=True)[:, 0]

    heads = cache.stack_head_results(layer=-1, pos_slice=None)  # (L H, 1, T, C), biases left out
    assert torch.allclose(attributed(heads).view(ours.heads.shape), ours.heads, atol=1e-4)
    feed_forward = torch.stack([cache["mlp_out", layer] for layer in range(trained.config.n_layer)])
    assert torch.allclose(attributed(feed_forward), ours.feed_forward, atol=1e-4)
    embeddings = (cache["embed"] + cache["pos_embed"])[None]
    assert attributed(embeddings).item() == pytest.approx(ours.embeddings, abs=1e-4)
    assert ours.heads.abs().max() > 0.1  # the trained heads have shares to compare


def test_activation_patching_matches_transformer_lens(trained):
    # the letter after the "1 5" changed: the answer moves by 17 logits (changing the 5 itself moved it by
    # 0.09, too little for shares, core.attribution.MIN_PATCH_GAP)
    clean, corrupted = TEXTS[0], [3, 1, 4, 1, 5, 7, 11, 3, 1, 4, 1, 5]
    ours = patch(trained, clean, corrupted)
    reference = hooked(trained)
    clean_tokens, corrupted_tokens = torch.tensor([clean]), torch.tensor([corrupted])
    _, clean_cache = reference.run_with_cache(clean_tokens)
    ours_difference = ours.clean_difference - ours.corrupted_difference

    def restored(logits: torch.Tensor) -> torch.Tensor:
        last = logits[0, -1]
        return (last[ours.target] - last[ours.alternative] - ours.corrupted_difference) / ours_difference

    assert restored(reference(clean_tokens)).item() == pytest.approx(1, abs=1e-4)
    assert restored(reference(corrupted_tokens)).item() == pytest.approx(0, abs=1e-4)
    heads = patching.get_act_patch_attn_head_out_all_pos(reference, corrupted_tokens, clean_cache, restored)
    assert torch.allclose(heads, ours.heads, atol=1e-4), (heads - ours.heads).abs().max()
    stream = patching.get_act_patch_resid_pre(reference, corrupted_tokens, clean_cache, restored)  # (L, T)
    assert torch.allclose(stream, ours.residual[:-1], atol=1e-4), (stream - ours.residual[:-1]).abs().max()
    assert ours.heads.abs().max() > 0.1  # the trained model's heads carry something to compare


def test_our_qk_circuit_is_transformer_lens_convention_plus_the_norm_the_biases_and_the_scale(trained):
    """TransformerLens's QK circuit is W_E W_Q W_K^T W_E^T: no norm, no biases, no 1/sqrt(d). Ours puts each
    embedding through layer 0's norm first, adds the query and key biases and scales, as the model does."""
    reference = hooked(trained)
    scale = trained.config.head_size ** -0.5
    embedded = reference.W_E  # (V, C)
    normed = reference.blocks[0].ln1(embedded[None])[0]
    for head in range(trained.config.n_head):
        ours = circuits(trained, 0, head).qk
        theirs = (embedded @ reference.QK[0, head] @ embedded.T).AB  # (V, V), TransformerLens's convention
        for convention in (theirs, theirs * scale):  # far apart: a tenth of our largest entry, at least
            assert (ours - convention).abs().max() > 0.1 * ours.abs().max()
        queries = normed @ reference.W_Q[0, head] + reference.b_Q[0, head]  # (V, D)
        keys = normed @ reference.W_K[0, head] + reference.b_K[0, head]
        assert torch.allclose(ours, queries @ keys.T * scale, atol=1e-4)
