"""Why this token: direct logit attribution, activation patching, and one head's QK and OV circuits.

Knock-outs (`core.interventions`) say that a head matters; these say what it does to the answer.

    parts = logit_attribution(model, ids, position=7)           # each head's share of logit(A) - logit(B)
    patched = patch(model, clean_ids, corrupted_ids)           # how much of the clean answer each part restores
    circuit = circuits(model, layer=1, head=0)                 # (V, V): what a head looks for, what it writes
    effects = head_effects(patched)                            # (L, H) each head's share, for the summary

The residual stream at the end is a sum: the embeddings, each head's output through its slice of
the output projection, each feed-forward layer's output and the biases. The final norm divides
that sum by one scale per position; frozen at the value the forward pass computed (as
TransformerLens does), it is linear, so every term's share of a logit difference adds up to the
model's own difference.

Shapes: L layers, H heads, T tokens, C channels, D head size, V vocabulary.
Every look inside goes through the model's hook points (`core.hooks`).
Imports core's model, hooks and checks. Never imports the training loop, gradio, plotly or `playground`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from core.checks import check_attention, check_head, check_token, evaluating, ids_tensor
from core.hooks import HookPoint
from core.model import GPT, KVCache

MAX_CIRCUIT_VOCAB = 512  # a (V, V) circuit is drawn whole; past this size it is neither legible nor cheap
# Patching divides each part's effect by the gap between the clean and corrupted logit differences. Below a
# tenth of a logit (the two answers' odds moving by about 10% between the texts) the corruption barely touched
# the answer, and the shares are small effects over almost nothing: a gap of 0.004 gave heads -2.9 to +1.7.
MIN_PATCH_GAP = 0.1
# A head whose share of the answer's lead (patched or attributed) is at least this, either way, has a large
# effect: the Attention tab's summary says so beside its pattern label, whatever the label.
LARGE_EFFECT = 0.1
# What `patch` can patch, by hook point: the residual stream (hook_embed, then each block's hook_resid_post)
# at one layer and position, and each head's output (attn.hook_z) at every position.
PATCH_PARTS = ("hook_resid_post", "hook_z")
# `patch` runs its patched copies in batches of about this many bytes (`_copy_bytes` each): GPT-2's names pair
# fits in one batch per layer; a long text runs a few copies at a time rather than hold them all at once.
PATCH_BATCH_BYTES = 64 * 2**20


def _check_decomposable(model: GPT) -> None:
    if not model.config.use_residual:
        raise ValueError("this model has no residual stream (its stage leaves residual connections out), "
                         "so its output is not a sum of its parts")
    check_attention(model)


def _frozen_final_norm(model: GPT, stream: torch.Tensor):
    """The final norm as a linear map with its scale frozen at the value it takes on `stream` (T, C):
    (apply, shift), where apply(parts (..., T, C)) is each part's share of the normalised stream and
    `shift` (C,) is what the norm adds on its own (LayerNorm's bias). apply(stream) + shift is ln_f(stream)."""
    norm = model.ln_f
    if isinstance(norm, nn.LayerNorm):
        scale = (stream.var(-1, unbiased=False, keepdim=True) + norm.eps).rsqrt()  # (T, 1)
        weight = norm.weight if norm.weight is not None else torch.ones_like(stream[0])
        shift = norm.bias if norm.bias is not None else torch.zeros_like(stream[0])
        return (lambda parts: (parts - parts.mean(-1, keepdim=True)) * scale * weight), shift
    if isinstance(norm, nn.RMSNorm):
        eps = norm.eps if norm.eps is not None else torch.finfo(stream.dtype).eps
        scale = (stream.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
        return (lambda parts: parts * scale * norm.weight), torch.zeros_like(stream[0])
    raise ValueError(f"no direct attribution through a final {type(norm).__name__}")


def _head_outputs(model: GPT, layer: int, z: torch.Tensor) -> torch.Tensor:
    """Each head's output z (H, T, D) through its slice of the layer's output projection: (H, T, C)."""
    H, D = model.config.n_head, model.config.head_size
    weight = model.blocks[layer].attn.proj.weight.view(-1, H, D)  # (C, H, D)
    return torch.einsum("htd,chd->htc", z, weight)


@dataclass(frozen=True)
class Attribution:
    """Direct logit attribution at one position: each part's direct effect on logit(target) -
    logit(alternative), through the final norm with its scale frozen at the forward pass's value.
    embeddings + heads.sum() + feed_forward.sum() + biases == difference."""

    position: int
    target: int  # token id A
    alternative: int  # token id B
    difference: float  # logit(A) - logit(B), the model's own
    embeddings: float  # the token (and learned position) embeddings
    heads: torch.Tensor  # (L, H) each head's output through its slice of the output projection
    feed_forward: torch.Tensor  # (L,) each feed-forward layer's output (its biases included); 0 without one
    biases: float  # the attention layers' output biases, the final norm's shift and the LM head's bias


def logit_attribution(model: GPT, ids: list[int], position: int = -1, target: int | None = None,
                      alternative: int | None = None) -> Attribution:
    """Why the model predicts `target` rather than `alternative` after ids[:position + 1]: each head's
    and each feed-forward layer's direct contribution. Defaults: the last position, the model's top
    prediction there and its runner-up."""
    _check_decomposable(model)
    idx = ids_tensor(model, ids)
    T = idx.size(1)
    if not isinstance(position, int) or isinstance(position, bool) or not -T <= position < T:
        raise ValueError(f"position must be 0 to {T - 1} (or negative, from the end), got {position!r}")
    position %= T
    embed, final = model.stream_names()[0], model.stream_names()[-1]
    zs = [block.attn.hook_z.name for block in model.blocks]
    mlps = [None if block.mlp is None else block.hook_mlp_out.name for block in model.blocks]
    with evaluating(model):
        logits, cache = model.run_with_cache(idx, names=[embed, final, *zs, *filter(None, mlps)])
    logits = logits[0, position].float()  # (V,)
    seen = {name: tensor[0] for name, tensor in cache.items()}
    ranked = logits.topk(min(2, logits.numel())).indices.tolist()
    target = ranked[0] if target is None else check_token(model, "target", target)
    if alternative is None:  # the runner-up (the leader if the target is not it)
        alternative = next(t for t in ranked if t != target)
    alternative = check_token(model, "alternative", alternative)
    if alternative == target:
        raise ValueError("the alternative must be a different token from the target")

    with torch.no_grad():
        stream = seen[final][position:position + 1].float()  # (1, C)
        normalise, shift = _frozen_final_norm(model, stream)
        unembed = model.lm_head.weight.float()
        direction = unembed[target] - unembed[alternative]  # (C,)

        def direct(parts: torch.Tensor) -> torch.Tensor:  # (..., 1, C) -> (...,)
            return (normalise(parts.float()) * direction).sum(-1)[..., 0]

        L, H = len(model.blocks), model.config.n_head
        heads, feed_forward = torch.zeros(L, H), torch.zeros(L)
        biases = (shift.float() * direction).sum()
        if model.lm_head.bias is not None:
            biases = biases + model.lm_head.bias[target].float() - model.lm_head.bias[alternative].float()
        for layer, block in enumerate(model.blocks):
            z = seen[zs[layer]][:, position:position + 1].float()  # (H, 1, D)
            heads[layer] = direct(_head_outputs(model, layer, z).float()).cpu()
            if block.attn.proj.bias is not None:
                biases = biases + direct(block.attn.proj.bias.float()[None])
            if block.mlp is not None:
                feed_forward[layer] = direct(seen[mlps[layer]][position:position + 1]).item()
        embeddings = direct(seen[embed][position:position + 1]).item()
    return Attribution(position, target, alternative, (logits[target] - logits[alternative]).item(),
                       embeddings, heads, feed_forward, float(biases))


@dataclass(frozen=True)
class Patching:
    """Activation patching: the corrupted text runs with one part taken from the clean run; each
    number is the share of the clean logit difference that part restores at the last position,
    (patched - corrupted) / (clean - corrupted): 0 = as corrupted, 1 = as clean. No shares (None)
    where that gap is under MIN_PATCH_GAP: there is too little to restore for a share to mean anything;
    nor for a part `patch` was not asked to patch."""

    target: int  # token id A: the clean answer
    alternative: int  # token id B: the corrupted answer
    clean_difference: float  # logit(A) - logit(B) on the clean text
    corrupted_difference: float  # the same on the corrupted text
    residual: torch.Tensor | None  # (L + 1, T) the stream after the embeddings, then after each layer, at one position
    heads: torch.Tensor | None  # (L, H) one head's output at every position

    @property
    def gap(self) -> float:
        """How much the corruption moved the answer: clean minus corrupted logit difference."""
        return self.clean_difference - self.corrupted_difference

    @property
    def meaningful(self) -> bool:
        """Whether the gap is large enough for shares of it to mean something (and so there are shares)."""
        return abs(self.gap) >= MIN_PATCH_GAP


def first_difference(clean: list[int], corrupted: list[int]) -> int:
    """The first position where the texts differ (their length if nowhere). Before it the two runs
    are the same, causal attention seeing only the past: `patch` runs nothing there."""
    return next((p for p, (a, b) in enumerate(zip(clean, corrupted)) if a != b), min(len(clean), len(corrupted)))


def patch_macs(config, n_tokens: int, first_different: int = 0) -> int:
    """At most how many multiply-adds `patch` does on texts of `n_tokens` that differ from position
    `first_different` on: the clean and corrupted runs, then every (layer, position from there) of the
    stream and every head runs the layers after it, on the positions from there (fewer copies where the
    streams agree, as the embeddings of unchanged tokens do). A server caps the tokens by it."""
    C, L, H = config.n_embd, config.n_layer, config.n_head
    kv = config.kv_heads * config.head_size
    feed_forward = (3 if config.activation == "swiglu" else 2) * C * config.ffn_hidden
    per_token_layer = C * (C + 2 * kv) + C * C + feed_forward + 2 * C * n_tokens
    computed = n_tokens - (first_different if config.causal else 0)  # the positions each copy computes
    later_layers = sum(L - row for row in range(L + 1))  # the stream rows, each runs the layers after it
    copies = computed * later_layers + H * sum(L - layer for layer in range(L))
    runs = 2 * (n_tokens * L * per_token_layer + config.vocab_size * C)  # the clean and corrupted: last logits only
    return runs + copies * computed * per_token_layer + (computed * (L + 1) + H * L) * 2 * C


class _SharedPrefix(KVCache):
    """The keys and values of the positions before the texts' first difference, the same in the clean, the
    corrupted and every patched run (attention is causal): each layer reads them for all the copies in a
    batch, and nothing is added to them, so the copies compute only the positions after."""

    def __init__(self, full: KVCache, length: int) -> None:
        super().__init__(0)
        self.layers = [(k[:, :, :length], v[:, :, :length]) for k, v in full.layers]

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        past_k, past_v = self.layers[layer]
        return (torch.cat([past_k.expand(k.size(0), -1, -1, -1), k], dim=2),
                torch.cat([past_v.expand(v.size(0), -1, -1, -1), v], dim=2))


def _copy_bytes(config, computed: int, seen: int) -> int:
    """About the most memory one patched copy holds in a block: `computed` positions of the stream, the
    query, key and value projections, the feed-forward's hidden layer, keys and values over `seen`
    positions, and the attention scores. `patch` sizes its batches by it."""
    C, H, kv = config.n_embd, config.n_head, config.kv_heads * config.head_size
    per_position = 6 * C + 2 * kv + 3 * config.ffn_hidden
    return 4 * (computed * per_position + 2 * seen * C + 3 * H * computed * seen)


def _checked_ids(model: GPT, name: str, ids: list[int]) -> list[int]:
    if not isinstance(ids, list) or not ids:
        raise ValueError(f"the {name} text has no tokens")
    for token in ids:
        check_token(model, f"every token of the {name} text", token)
    return ids


def _checked_parts(parts: str | Iterable[str]) -> set[str]:
    chosen = {parts} if isinstance(parts, str) else set(parts)
    unknown = chosen - set(PATCH_PARTS)
    if not chosen or unknown:
        raise ValueError(f"patch parts must be some of {PATCH_PARTS}, got {sorted(unknown) or 'none'}")
    return chosen


def patch(model: GPT, clean: list[int], corrupted: list[int], target: int | None = None,
          alternative: int | None = None, parts: str | Iterable[str] = PATCH_PARTS,
          batch_bytes: int = PATCH_BATCH_BYTES) -> Patching:
    """Patch the clean run into the corrupted one, part by part, and read the logit difference at
    the last position. `parts` names the hook points patched (PATCH_PARTS, both by default): the
    stream at each layer and position, each head's output everywhere; a part not asked for is None.
    Defaults: the clean text's prediction against the corrupted one's (the clean runner-up when both
    predict the same). Under MIN_PATCH_GAP apart, no part is run.

    The patched copies run in batches along the batch dimension, about `batch_bytes` at a time: each copy
    joins its batch at the first block it changes (the stream entering that block at one place, or one of
    the block's heads), so each block runs once for every copy that has reached it; and each computes only
    the positions from the texts' first difference on, reading those before it from the corrupted run's keys
    and values (the same in every run). Each copy's share is what a forward pass of its own, patched in that
    one place, gives."""
    _check_decomposable(model)
    parts = _checked_parts(parts)
    if len(_checked_ids(model, "clean", clean)) != len(_checked_ids(model, "corrupted", corrupted)):
        raise ValueError(f"the clean and corrupted texts must have the same number of tokens, got "
                         f"{len(clean)} and {len(corrupted)}")
    if clean == corrupted:
        raise ValueError("the clean and corrupted texts are the same, so there is nothing to restore: change "
                         "the corrupted text where the answer depends on it")
    L, H, T = len(model.blocks), model.config.n_head, len(clean)
    stream_names = model.stream_names()  # row l: the stream entering block l; row L: after the last
    z_names = [block.attn.hook_z.name for block in model.blocks]

    def run(ids: list[int], cache: KVCache | None = None):
        """Last-position logits (V,), the stream rows [(T, C)] * (L + 1), each layer's z (H, T, D)."""
        with model.caching(stream_names + z_names) as seen:
            logits = model(ids_tensor(model, ids), cache=cache, last_only=True)[0]
        return logits[0, -1].float(), [seen[name][0] for name in stream_names], [seen[name][0] for name in z_names]

    with evaluating(model):
        keys_and_values = model.new_cache()
        clean_logits, clean_streams, clean_z = run(clean)
        corrupted_logits, corrupted_streams, _ = run(corrupted, keys_and_values)
        target = clean_logits.argmax().item() if target is None else check_token(model, "target", target)
        if alternative is None:
            alternative = corrupted_logits.argmax().item()
            if alternative == target:
                alternative = clean_logits.topk(2).indices[1].item()
        alternative = check_token(model, "alternative", alternative)
        if alternative == target:
            raise ValueError("the alternative must be a different token from the target")

        # logit(target) - logit(alternative) of the final stream: the LM head's two rows, not all V of them
        direction = (model.lm_head.weight[target] - model.lm_head.weight[alternative]).float()
        bias = model.lm_head.bias
        offset = 0.0 if bias is None else (bias[target] - bias[alternative]).float()

        def difference(logits: torch.Tensor) -> torch.Tensor:
            return logits[..., target] - logits[..., alternative]

        clean_difference, corrupted_difference = difference(clean_logits), difference(corrupted_logits)
        gap = clean_difference - corrupted_difference
        if gap.abs() < MIN_PATCH_GAP:
            return Patching(target, alternative, clean_difference.item(), corrupted_difference.item(), None, None)

        # Causal attention: before the first difference every run, patched or not, is the same.
        shared = first_difference(clean, corrupted) if model.config.causal else 0
        prefix = _SharedPrefix(keys_and_values, shared) if shared else None
        per_batch = max(1, batch_bytes // _copy_bytes(model.config, T - shared, T))

        def restored(batch: list[tuple[int, int, int | None]]) -> torch.Tensor:
            """Shares (N,) of a batch of copies (first block, place, head), in the order of their first
            blocks. Each joins the batch at its first block, as the corrupted stream there made clean at
            its place (a stream copy: head None) or with its head's clean output in that block (a head
            copy: place None); the batch grows block by block, so each block runs once for all its copies."""
            x = None
            for layer in range(batch[0][0], L + 1):
                joining = [(row, place, head) for row, (first, place, head) in enumerate(batch) if first == layer]
                new = corrupted_streams[layer][shared:].expand(len(joining), -1, -1).clone()  # (n, T - shared, C)
                cleaned = [(index, place) for index, (_, place, head) in enumerate(joining) if head is None]
                if cleaned:
                    indices, places = (list(column) for column in zip(*cleaned))
                    new[indices, [place - shared for place in places]] = clean_streams[layer][places]
                x = new if x is None else torch.cat([x, new])
                if layer == L:
                    break
                rows, chosen = [row for row, _, head in joining if head is not None], \
                    [head for _, _, head in joining if head is not None]

                def take_clean(z: torch.Tensor, _hook: HookPoint, layer: int = layer) -> torch.Tensor:
                    z = z.clone()  # (N, H, T - shared, D): each head copy joining here takes its head's clean output
                    z[rows, chosen] = clean_z[layer][chosen, shared:]
                    return z

                with model.hooks([(z_names[layer], take_clean)] if rows else []):
                    x = model.blocks[layer](x, prefix, layer)
            return ((model.ln_f(x[:, -1]).float() @ direction + offset - corrupted_difference) / gap).cpu()

        copies: list[tuple[int, int | None, int | None]] = []  # (first block, place, head), by first block
        for first in range(L + 1):
            if "hook_resid_post" in parts:
                # Where both runs carry the same vector (every position before the first change, and at the
                # embeddings every unchanged token), patching restores 0: no copy needed.
                differs = (clean_streams[first] != corrupted_streams[first]).any(-1).nonzero()[:, 0].tolist()
                copies += [(first, place, None) for place in differs]
            if "hook_z" in parts and first < L:
                copies += [(first, None, head) for head in range(H)]
        residual = torch.zeros(L + 1, T) if "hook_resid_post" in parts else None
        heads = torch.zeros(L, H) if "hook_z" in parts else None
        for start in range(0, len(copies), per_batch):
            batch = copies[start:start + per_batch]
            for (first, place, head), share in zip(batch, restored(batch).tolist()):
                if head is None:
                    residual[first, place] = share
                else:
                    heads[first, head] = share
    return Patching(target, alternative, clean_difference.item(), corrupted_difference.item(), residual, heads)


@dataclass(frozen=True)
class HeadEffects:
    """Each head's measured effect on one answer of a text, as a share of that answer's lead: by patching
    (the share of the clean answer's lead that the head's clean output restores) or by direct logit
    attribution (its direct part of logit(A) - logit(B) over that difference). Pattern labels say where a
    head looks; these say what it does to the answer, and the two can disagree."""

    method: str  # "patching" or "attribution"
    target: int  # token id A
    alternative: int  # token id B
    shares: torch.Tensor  # (L, H)

    def large(self) -> torch.Tensor:
        """(L, H) booleans: the heads whose share is at least LARGE_EFFECT either way."""
        return self.shares.abs() >= LARGE_EFFECT

    def ranked(self) -> list[tuple[int, int, float]]:
        """(layer, head, share) of the heads with a large effect, the largest first (by size)."""
        layers, heads = self.large().nonzero(as_tuple=True)
        found = [(layer, head, self.shares[layer, head].item()) for layer, head in zip(layers.tolist(), heads.tolist())]
        return sorted(found, key=lambda item: -abs(item[2]))


def head_effects(result: Patching | Attribution) -> HeadEffects | None:
    """Each head's share of the answer's lead from a patching or an attribution; None where there are no
    shares (a patching whose gap is under MIN_PATCH_GAP, or without heads; an attribution whose
    difference is under MIN_PATCH_GAP, the same reason: a share of almost nothing means nothing)."""
    if isinstance(result, Patching):
        if not result.meaningful or result.heads is None:
            return None
        return HeadEffects("patching", result.target, result.alternative, result.heads.clone())
    if abs(result.difference) < MIN_PATCH_GAP:
        return None
    return HeadEffects("attribution", result.target, result.alternative, result.heads / result.difference)


@dataclass(frozen=True)
class Circuits:
    """One head's circuits on the direct path (Elhage et al. 2021), token by token. Each token's
    embedding goes through the layer's norm alone, as if it were the whole stream, then through the
    head's projections with their biases; the OV circuit's output goes through the final norm's
    weight, not its normalisation.

    qk[a, b] is the score query token a gives key token b (scaled, before the mask and the softmax)
    where the stream holds each token alone: in layer 0 of a model without learned positions (no
    positions, RoPE, ALiBi) that is exactly the model's own score before its positions act (RoPE's
    turn, ALiBi's penalty), whatever the tokens' places. With learned positions layer 0 reads the norm
    of token plus position, which is neither circuit nor their sum: the circuits are views of what the
    head looks for by token and by place (the `repeat` preset's trained model, on its line
    qwhzbkad|qwhzbkad: entries up to 14.3 off layer-0 scores of at most 14.3). Behind other layers'
    outputs it is an approximation.

    TransformerLens's QK circuit, W_E W_Q W_K^T W_E^T, leaves out the norm (`fold_ln` folds its weight
    into W_Q and W_K, never its division by each vector's spread), the biases and the 1/sqrt(d) scale:
    a view of the weights alone, not the scores the model computes."""

    layer: int
    head: int
    qk: torch.Tensor  # (V, V) query token x key token: the score before the softmax
    ov: torch.Tensor  # (V, V) attended token x output token: what attending to it adds to each logit
    positional_qk: torch.Tensor | None  # (T, T) query position x key position, where positions are learned
    copying_score: float  # sum of the OV circuit's eigenvalues over the sum of their sizes: 1 = copies


def circuits(model: GPT, layer: int, head: int) -> Circuits:
    """The QK and OV circuits of one head, for a vocabulary of at most MAX_CIRCUIT_VOCAB tokens."""
    _check_decomposable(model)
    check_head(model, layer, head)
    config = model.config
    if config.vocab_size > MAX_CIRCUIT_VOCAB:
        raise ValueError(f"circuits are drawn for vocabularies of at most {MAX_CIRCUIT_VOCAB} tokens; this "
                         f"model has {config.vocab_size:,}")
    attn, D = model.blocks[layer].attn, config.head_size
    group = head // (config.n_head // config.kv_heads)  # the key/value head this query head reads
    C, kv = config.n_embd, config.kv_heads * D
    weight = attn.qkv.weight.float()  # (C + 2 kv, C): queries, keys, values
    bias = attn.qkv.bias.float() if attn.qkv.bias is not None else torch.zeros(C + 2 * kv, device=weight.device)
    rows = {"q": slice(head * D, (head + 1) * D), "k": slice(C + group * D, C + (group + 1) * D),
            "v": slice(C + kv + group * D, C + kv + (group + 1) * D)}

    def project(x: torch.Tensor, part: str) -> torch.Tensor:  # (N, C) -> (N, D)
        return x @ weight[rows[part]].T + bias[rows[part]]

    scale = 1 / math.sqrt(D) if attn.scale is None else attn.scale
    with evaluating(model):
        norm = model.blocks[layer].ln1
        tokens = norm(model.token_embedding.weight).float()  # (V, C)
        qk = project(tokens, "q") @ project(tokens, "k").T * scale  # (V, V)
        positional = None
        if model.position_embedding is not None:
            places = norm(model.position_embedding.weight).float()  # (T, C)
            positional = project(places, "q") @ project(places, "k").T * scale
        written = project(tokens, "v") @ attn.proj.weight.float()[:, head * D:(head + 1) * D].T  # (V, C)
        final_weight = getattr(model.ln_f, "weight", None)
        if final_weight is not None:
            written = written * final_weight.float()
        ov = written @ model.lm_head.weight.float().T  # (V, V)
        eigenvalues = torch.linalg.eigvals(ov.double())
        copying = (eigenvalues.sum().real / eigenvalues.abs().sum()).item()
    return Circuits(layer, head, qk.cpu(), ov.cpu(), None if positional is None else positional.cpu(), copying)
