"""Running a model differently to see what its parts do: one head's arithmetic step by step,
knock-outs (ablation) and each head's importance, and the logit lens.

`core.attention` reads and names the patterns a model makes; this module intervenes on the model
(hooks that replace a head's output, a forward pass stopped early) and measures what changes. Every
function leaves the model as it found it: mode, weights and hooks.

    steps = head_steps(model, ids, layer=1, head=0, query=7)   # q, k, q.k, /sqrt(d), mask, softmax, v
    with ablate(model, [(1, 0)], "mean", over=ids):            # L1 H0 writes its mean over the text
        loss = text_loss(model, ids)
    importance = head_importance(model, ids)                   # (L, H): the loss increase per head alone
    lens = logit_lens(model, ids)                              # the prediction read after every layer

Shapes: L layers, H heads, T tokens, D head size, V vocabulary.
Every look inside goes through the model's hook points (`core.hooks`): `model.hooks`, `model.caching`.
Imports core's model, hooks, checks and config. Never imports the training loop, gradio, plotly or `playground`:
core is the UI-free package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from core.checks import check_attention, check_head, evaluating, ids_tensor
from core.config import GPTConfig
from core.hooks import HookPoint
from core.model import GPT, alibi_penalty


@dataclass(frozen=True)
class HeadSteps:
    """One head's attention for one query token, step by step, in the model's own numbers.
    T tokens, D the head size; the query sees keys 0..query. A model built without the scaling or
    the mask (GPTConfig.scale_attention, .causal) skips that step here too (`scaled` equals `scores`,
    nothing is masked after the query): `weights` are always the model's own."""

    layer: int
    head: int
    query: int
    q: torch.Tensor  # (D,) the query token's query vector (rotated by its position, with RoPE)
    k: torch.Tensor  # (T, D) every token's key (likewise; with grouped queries, its group's key head)
    scores: torch.Tensor  # (T,) q . k for every key
    scaled: torch.Tensor  # (T,) scores / sqrt(D): keeps the softmax from saturating as D grows
    masked: torch.Tensor  # (T,) scaled, -inf on the keys the mask hides (after the query; beyond a window),
    # minus ALiBi's distance penalty where positions are ALiBi
    weights: torch.Tensor  # (T,) softmax(masked): the row of the head's heatmap
    values: torch.Tensor  # (T, D) every token's value vector
    weighted: torch.Tensor  # (T, D) each value times its weight
    output: torch.Tensor  # (D,) their sum: what the head writes for the query token
    weights_unscaled: torch.Tensor  # (T,) what the weights would be without the division by sqrt(D)
    weights_unmasked: torch.Tensor  # (T,) ... and without the mask (the query would see the future)
    # With RoPE: the query and the keys before their turn by position (q and k above are after it).
    q_unrotated: torch.Tensor | None = None  # (D,)
    k_unrotated: torch.Tensor | None = None  # (T, D)
    alibi: torch.Tensor | None = None  # (T,) with ALiBi: the penalty -slope * distance added to `scaled`
    # How the model was built (its GPTConfig's fields): what the steps above did and did not do.
    scale_attention: bool = True  # the scores were divided by sqrt(D)
    causal: bool = True  # the keys after the query were masked
    position: str = "learned"  # where positions came from (GPTConfig.position): learned, none, rope, alibi

    @property
    def alibi_slope(self) -> float | None:
        """ALiBi's slope of this head (None without ALiBi, or for the first token: nothing is behind it)."""
        return None if self.alibi is None or self.query == 0 else -self.alibi[0].item() / self.query

    @property
    def out_of_window(self) -> int:
        """How many of the keys up to the query a sliding window hides (the earliest ones)."""
        return int(torch.isinf(self.masked[: self.query + 1]).sum())

    def to_dict(self) -> dict:
        """Plain lists of floats (JSON), -inf as None."""
        def plain(value):
            if isinstance(value, torch.Tensor):
                return [[plain(v) for v in row] for row in value.tolist()] if value.dim() == 2 else \
                    [None if math.isinf(v) else v for v in value.tolist()]
            return value
        return {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)}


def head_steps(model: GPT, ids: list[int], layer: int, head: int, query: int) -> HeadSteps:
    """Recompute one head's attention for one query token from the input of its layer, one
    operation at a time; the weights and the output equal the model's own (float32, within 1e-6)."""
    check_head(model, layer, head)
    idx = ids_tensor(model, ids)
    if not isinstance(query, int) or isinstance(query, bool) or not 0 <= query < len(ids):
        raise ValueError(f"query token must be 0 to {len(ids) - 1}, got {query!r}")
    block = model.blocks[layer]
    attn, entering = block.attn, model.stream_names()[layer]
    with evaluating(model):
        _, cache = model.run_with_cache(idx, names=entering)
        x = block.ln1(cache[entering])  # (1, T, C): the layer's input, after its norm
        # the query and key heads before RoPE: (1, H or KV, T, D)
        with model.caching([attn.hook_q.name, attn.hook_k.name]) as unrotated:
            q_all, k_all, v_all, _ = attn.heads(x)  # (1, H, T, D): rotated where positions are rotary
    T, D = len(ids), model.config.head_size
    rotary = model.config.position == "rope"
    kv_head = head // (model.config.n_head // model.config.kv_heads)  # the key/value head of its group
    with torch.no_grad():
        q, k, v = q_all[0, head, query], k_all[0, head], v_all[0, head]  # (D,), (T, D), (T, D)
        scores = k @ q  # (T,)
        scaled = scores / math.sqrt(D) if model.config.scale_attention else scores  # as the model does
        # The mask hides the keys after the query (a model built without it hides none) and, with a
        # sliding window, those too far back; ALiBi subtracts a penalty that grows with the distance.
        bias = attn.score_bias(T, 0, x.device)  # (H or 1, T, T) or None
        row = torch.zeros(T, device=x.device) if bias is None else bias[head if bias.size(0) > 1 else 0, query]
        alibi = (alibi_penalty(model.config.n_head, torch.tensor([query]), torch.arange(T))[head, 0]
                 if model.config.position == "alibi" else torch.zeros(T))  # every key's, the hidden ones' too
        masked = scaled + row
        weights = F.softmax(masked, dim=-1)
        weighted = weights[:, None] * v
    return HeadSteps(
        layer, head, query, q.cpu(), k.cpu(), scores.cpu(), scaled.cpu(), masked.cpu(), weights.cpu(), v.cpu(),
        weighted.cpu(), weighted.sum(0).cpu(),
        weights_unscaled=F.softmax(scores + row, dim=-1).cpu(),
        weights_unmasked=F.softmax(scaled + alibi.to(scaled.device), dim=-1).cpu(),
        q_unrotated=unrotated[attn.hook_q.name][0, head, query].cpu() if rotary else None,
        k_unrotated=unrotated[attn.hook_k.name][0, kv_head].cpu() if rotary else None,
        alibi=alibi if model.config.position == "alibi" else None,
        scale_attention=model.config.scale_attention, causal=model.config.causal, position=model.config.position,
    )


ABLATIONS = ("zero", "mean")
LOGITS_PER_CHUNK = 8_000_000  # head_importance runs copies of the text in chunks of at most this many logits


def _switch_off(z: torch.Tensor, rows: torch.Tensor, heads: torch.Tensor, mode: str) -> torch.Tensor:
    """z (B, H, T, D) with head heads[i] of batch row rows[i] written as nothing ("zero") or as its
    mean over the row's tokens ("mean": what the head writes everywhere stays, what depends on the
    token goes)."""
    z = z.clone()
    z[rows, heads] = 0 if mode == "zero" else z[rows, heads].mean(dim=1, keepdim=True)
    return z


def _checked_mode(mode: str) -> str:
    if mode not in ABLATIONS:
        raise ValueError(f"mode must be one of {ABLATIONS}, got {mode!r}")
    return mode


def head_means(model: GPT, ids: list[int]) -> list[torch.Tensor]:
    """Per attention layer, each head's mean output over the tokens of `ids`: (H, D) tensors."""
    idx = ids_tensor(model, ids)
    with evaluating(model):
        _, cache = model.run_with_cache(idx, names=_is_head_output)
    return [z[0].mean(dim=1) for z in cache.values()]


def _is_head_output(name: str) -> bool:
    return name.endswith("attn.hook_z")


@contextlib.contextmanager
def ablate(model: GPT, heads: Iterable[tuple[int, int]], mode: str = "zero",
           over: list[int] | None = None) -> Iterator[None]:
    """Switch heads off inside the block: each (layer, head) writes nothing ("zero") or its mean
    output ("mean": what the head writes everywhere stays, what depends on the token goes). The mean
    is over the tokens of `over` as the intact model runs it (fixed, so generation may use its
    cache), or without `over`, over each text's own tokens as it runs. The layer's output projection
    and its bias stay, so a layer with every head off adds only that bias (nothing without biases).

    >>> with ablate(model, [(1, 0), (1, 3)]):
    ...     logits, loss = model(idx, targets)
    """
    _checked_mode(mode)
    by_layer: dict[int, set[int]] = {}
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"each head is a (layer, head) pair, got {pair!r}")
        layer, head = pair
        check_head(model, layer, head)
        by_layer.setdefault(layer, set()).add(head)
    means = head_means(model, over) if mode == "mean" and over is not None else None

    def knock_out(layer: int, off: list[int]):
        def hook(z: torch.Tensor, _hook: HookPoint) -> torch.Tensor:  # z: (B, H, T, D)
            if means is not None:
                z = z.clone()
                z[:, off] = means[layer][off][None, :, None, :].to(z.dtype)
                return z
            rows = torch.arange(z.size(0), device=z.device).repeat_interleave(len(off))
            return _switch_off(z, rows, torch.tensor(off * z.size(0), device=z.device), mode)
        return hook

    with model.hooks([(model.blocks[layer].attn.hook_z.name, knock_out(layer, sorted(off)))
                      for layer, off in by_layer.items()]):
        yield


def text_loss(model: GPT, ids: list[int]) -> float:
    """The model's mean next-token loss on `ids` (eval mode, no gradients)."""
    idx = ids_tensor(model, ids)
    if len(ids) < 2:
        raise ValueError("the loss needs a text of at least 2 tokens")
    with evaluating(model):
        return model(idx[:, :-1], idx[:, 1:])[1].item()


def importance_macs(config: GPTConfig, n_tokens: int) -> int:
    """About how many multiply-adds `head_importance` does on `n_tokens` tokens: for each head, the
    layers from its own to the last, then the unembedding. (GPT-2 small: ~12 G per token; a 6-layer
    model of 256 channels: ~0.1 G.) A server caps the tokens by it."""
    C, L, H = config.n_embd, config.n_layer, config.n_head
    kv = config.kv_heads * config.head_size  # channels of the keys, and of the values
    feed_forward = (3 if config.activation == "swiglu" else 2) * C * config.ffn_hidden
    # qkv, projection, feed-forward; the attention itself
    per_layer = C * (C + 2 * kv) + C * C + feed_forward + 2 * C * n_tokens
    per_head_copy = sum((L - layer) * per_layer + config.vocab_size * C for layer in range(L))
    return H * n_tokens * per_head_copy


def head_importance(model: GPT, ids: list[int], mode: str = "zero") -> torch.Tensor:
    """(L, H): how much the loss on `ids` rises when each head alone is switched off (`ablate`).

    The intact model runs once; then, for each layer l, H copies of the residual stream entering
    layer l (shared: nothing before l changes) run the rest of the model, copy h without head h.
    """
    _checked_mode(mode)
    idx = ids_tensor(model, ids)
    if len(ids) < 2:
        raise ValueError("the loss needs a text of at least 2 tokens")
    check_attention(model)
    L, H = len(model.blocks), model.config.n_head
    inputs, targets = idx[:, :-1], idx[0, 1:]
    entering = model.stream_names()[:-1]  # the stream entering each block: the embeddings, then each block's output
    with evaluating(model), model.caching(entering) as streams:
        intact = model(inputs, idx[:, 1:])[1].float().cpu()
    chunk = max(1, LOGITS_PER_CHUNK // (len(ids) * model.config.vocab_size))  # copies whose logits fit at once
    importance = torch.zeros(L, H)
    for layer in range(L):
        for first in range(0, H, chunk):
            heads = torch.arange(first, min(first + chunk, H), device=idx.device)
            copies = torch.arange(len(heads), device=idx.device)
            knock_out = (model.blocks[layer].attn.hook_z.name, lambda z, _hook: _switch_off(z, copies, heads, mode))
            with evaluating(model), model.hooks([knock_out]):
                x = streams[entering[layer]].expand(len(heads), -1, -1)  # (copies, T, C)
                logits = model.lm_head(model.ln_f(model.run_from(x, layer))).float()  # (copies, T, V)
                losses = F.cross_entropy(logits.transpose(1, 2), targets.expand(len(heads), -1),
                                         reduction="none").mean(-1)
            importance[layer, first:first + len(heads)] = losses.cpu() - intact
    return importance


@dataclass(frozen=True)
class LogitLens:
    """What the residual stream would predict at each depth, read through the final LayerNorm and
    the LM head. Rows: the embeddings, then after each layer (the last row is the model's output)."""

    depths: list[str]  # "embeddings", "layer 0", ...
    top_ids: torch.Tensor  # (depths, T, k) the k likeliest next tokens at each position
    top_probs: torch.Tensor  # (depths, T, k) their probabilities
    target_probs: torch.Tensor  # (depths, T - 1) the probability of the token that really comes next
    target_ranks: torch.Tensor  # (depths, T - 1) its rank among all tokens (0 = the likeliest)


def logit_lens(model: GPT, ids: list[int], top_k: int = 5) -> LogitLens:
    """The logit lens (nostalgebraist, 2020) on one text. One depth at a time, so a large
    vocabulary never needs all depths' logits at once."""
    idx = ids_tensor(model, ids)
    with evaluating(model):
        _, streams = model.run_with_cache(idx, names=model.stream_names())
        k = min(top_k, model.config.vocab_size)
        top_ids, top_probs, target_probs, target_ranks = [], [], [], []
        targets = idx[0, 1:]  # (T - 1,)
        for stream in streams.values():  # (1, T, C)
            probs = F.softmax(model.lm_head(model.ln_f(stream[0])).float(), dim=-1)  # (T, V)
            best = probs.topk(k, dim=-1)
            top_ids.append(best.indices)
            top_probs.append(best.values)
            true = probs[:-1].gather(1, targets[:, None])  # (T - 1, 1)
            target_probs.append(true[:, 0])
            target_ranks.append((probs[:-1] > true).sum(-1))
    depths = ["embeddings"] + [f"layer {i}" for i in range(len(model.blocks))]
    return LogitLens(depths, *(torch.stack(rows).cpu() for rows in (top_ids, top_probs, target_probs, target_ranks)))
