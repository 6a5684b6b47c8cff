"""A GPT-2 style decoder that reads top to bottom.

Shapes: B batch, T time (tokens), C channels (n_embd), H heads, KV key/value heads, D head size (C // H).

The seeds' teaching progression (bigram -> full GPT) is a set of switches on this one
model (see `core.config.STAGES`). What people look at passes through named hook points,
TransformerLens style (`core.hooks`):

    hook_embed                    (B, T, C)     the residual stream before any block
    blocks.{i}.attn.hook_q        (B, H, T, D)  queries, before RoPE turns them
    blocks.{i}.attn.hook_k        (B, KV, T, D) keys, likewise
    blocks.{i}.attn.hook_pattern  (B, H, T, T)  attention weights (T_seen keys with a KV cache)
    blocks.{i}.attn.hook_z        (B, H, T, D)  each head's output, before the heads are mixed
    blocks.{i}.hook_attn_out      (B, T, C)     what attention adds to the stream
    blocks.{i}.hook_mlp_out       (B, T, C)     what the feed-forward adds
    blocks.{i}.hook_resid_post    (B, T, C)     the stream after block i

    with model.hooks([("blocks.1.attn.hook_z", fn)]):   # fn(tensor, hook) -> a replacement or None
        logits, loss = model(idx, targets)
    logits = model.run_with_hooks(idx, fwd_hooks=[(name_or_test, fn)])
    logits, cache = model.run_with_cache(idx, names=["hook_embed", "blocks.0.attn.hook_pattern"])
    with model.caching(model.stream_names()) as streams:   # the same cache around any call
        logits, loss = model(idx, targets)
    x = model.run_from(stream, layer)                   # the rest of a pass from the stream entering a block

Nobody looking at attention means the fast fused `scaled_dot_product_attention`; somebody
looking means an explicit masked softmax whose tensors pass through the hook points.

Imports the config and the hook points. Never imports the training loop, the analysis, gradio, plotly or
`playground`: everything looks at the model through its hook points.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator

import torch
import torch.nn as nn
from torch.nn import functional as F

from core.config import GPTConfig
from core.hooks import Hooked, HookPoint


class KVCache:
    """Keys and values of the positions seen so far, one (k, v) pair per layer.

    Each tensor is (B, KV, T_seen, D), one per key/value head (fewer than the query heads with grouped
    queries), keys already rotated where positions are rotary. Positions are absolute, so a cache is
    only valid for the exact prefix it was built from; `core.sample` rebuilds it when the window moves.
    """

    def __init__(self, n_layer: int) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * n_layer

    def seen(self, layer: int = 0) -> int:
        """How many positions `layer` has cached (all layers agree between forward passes)."""
        entry = self.layers[layer] if self.layers else None
        return 0 if entry is None else entry[0].size(2)

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        past = self.layers[layer]
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        self.layers[layer] = (k, v)
        return k, v


def alibi_slopes(n_head: int) -> torch.Tensor:
    """ALiBi's slope for each head (Press et al. 2022): for n heads a power of two, the geometric
    sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8); otherwise those of the power of two just below, then
    every other slope of the next power of two, as the paper's code does."""
    def powers(n: int) -> list[float]:
        return [2 ** (-8 * (i + 1) / n) for i in range(n)]
    below = 2 ** math.floor(math.log2(n_head))
    slopes = powers(below) + powers(2 * below)[0::2][: n_head - below]
    return torch.tensor(slopes)


def alibi_penalty(n_head: int, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """ALiBi's bias on the scores, (H, Tq, Tk): each head's slope times the distance between the
    absolute positions `query` (Tq,) and `key` (Tk,), negated: far keys count less."""
    distance = (query[:, None] - key[None, :]).abs()  # (Tq, Tk)
    return -alibi_slopes(n_head).to(query.device)[:, None, None] * distance


def rotate(x: torch.Tensor, position: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary position embedding of x (..., T, D) at absolute positions (T,): channel pairs (i, i + D/2)
    turn by the angle position * base^(-2i/D), the half-split layout of Llama and Hugging Face."""
    D = x.size(-1)
    exact = torch.float64 if x.dtype == torch.float64 else torch.float32  # angles as Llama computes them
    frequencies = base ** (-torch.arange(0, D, 2, device=x.device, dtype=exact) / D)  # (D/2,)
    angles = position.to(exact)[:, None] * frequencies  # (T, D/2)
    cos, sin = (t.repeat(1, 2).to(x.dtype) for t in (angles.cos(), angles.sin()))  # (T, D)
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.head_size = config.n_head, config.kv_heads, config.head_size
        self.dropout = config.dropout
        self.causal = config.causal
        self.window = config.window
        self.scale = None if config.scale_attention else 1.0  # None: 1/sqrt(D), as every GPT does
        self.rope_base = config.rope_base if config.position == "rope" else None
        self.alibi = config.position == "alibi"  # ALiBi's slopes are fixed, not learned: made when used
        # query, key and value for all heads in one matrix (keys and values: one per key/value head)
        kv_channels = self.n_kv_head * self.head_size
        self.qkv = nn.Linear(config.n_embd, config.n_embd + 2 * kv_channels, bias=config.qkv_bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.hook_q = HookPoint()  # (B, H, T, D) queries, before RoPE turns them
        self.hook_k = HookPoint()  # (B, KV, T, D) keys, likewise (one per key/value head)
        self.hook_pattern = HookPoint()  # (B, H, T, T_seen) attention weights
        self.hook_z = HookPoint()  # (B, H, T, D) each head's output: hooks may read or replace it
        self.fused = True  # False: always the explicit path (see GPT.explicit_attention)

    def heads(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0):
        """(q, k, v) of every query head, (B, H, T, D) and (B, H, past + T, D), and `past`, the
        positions cached before x: keys rotated where positions are rotary, and each key/value head
        repeated for the query heads of its group."""
        B, T, C = x.shape
        kv_channels = self.n_kv_head * self.head_size
        q, k, v = self.qkv(x).split([C, kv_channels, kv_channels], dim=2)
        # (B, T, C) -> (B, H, T, D); keys and values (B, KV, T, D)
        q = self.hook_q(q.view(B, T, self.n_head, self.head_size).transpose(1, 2))
        k, v = (t.view(B, T, self.n_kv_head, self.head_size).transpose(1, 2) for t in (k, v))
        k = self.hook_k(k)
        past = 0 if cache is None else cache.seen(layer)
        if self.rope_base is not None:
            position = torch.arange(past, past + T, device=x.device)
            q, k = rotate(q, position, self.rope_base), rotate(k, position, self.rope_base)
        if cache is not None:
            k, v = cache.extend(layer, k, v)  # (B, KV, past + T, D)
        if self.n_kv_head != self.n_head:  # each key/value head serves a group of query heads
            k, v = (t.repeat_interleave(self.n_head // self.n_kv_head, dim=1) for t in (k, v))
        return q, k, v, past

    def score_bias(self, T: int, past: int, device: torch.device) -> torch.Tensor | None:
        """What is added to the scaled scores, (H or 1, T, past + T): -inf where a query may not look
        (after it under the causal mask, beyond the window), ALiBi's distance penalty; None for none."""
        query = torch.arange(past, past + T, device=device)  # absolute positions
        key = torch.arange(past + T, device=device)
        hidden = torch.zeros(T, past + T, dtype=torch.bool, device=device)
        if self.causal:
            hidden |= key[None, :] > query[:, None]
        if self.window is not None:
            hidden |= key[None, :] <= query[:, None] - self.window
        if not self.alibi and not hidden.any():
            return None
        bias = torch.zeros(1, T, past + T, device=device).masked_fill(hidden, float("-inf"))
        if self.alibi:
            bias = bias + alibi_penalty(self.n_head, query, key)
        return bias

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v, past = self.heads(x, cache, layer)
        plain = not self.alibi and self.window is None  # GPT-2's attention: the causal mask at most
        if self.hook_pattern.active or self.hook_z.active or not self.fused:
            # Explicit path: the weights exist as a tensor that hooks can see.
            scale = 1 / math.sqrt(k.size(-1)) if self.scale is None else self.scale
            scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, past + T)
            if plain and self.causal:
                scores = scores.masked_fill(~_causal_mask(T, past, x.device), float("-inf"))
            elif not plain:
                scores = scores + self.score_bias(T, past, x.device).to(scores.dtype)
            weights = self.hook_pattern(F.softmax(scores, dim=-1))
            y = self.hook_z(self.attn_dropout(weights) @ v)  # (B, H, T, D)
        else:
            # Fused path. With a cache, a single new token may see everything before it;
            # a chunk after a non-empty cache needs the offset mask.
            masked = self.causal and T > 1
            if plain:
                mask = _causal_mask(T, past, x.device) if masked and past > 0 else None
            else:
                mask = self.score_bias(T, past, x.device)
                mask = None if mask is None else mask.to(q.dtype)
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=plain and masked and past == 0,
                dropout_p=self.dropout if self.training else 0.0, scale=self.scale,
            )
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble heads: (B, T, C)
        return self.resid_dropout(self.proj(y))


def _causal_mask(T: int, past: int, device: torch.device) -> torch.Tensor:
    """(T, past + T) booleans: query i (at absolute position past + i) sees keys <= it."""
    return torch.ones(T, past + T, dtype=torch.bool, device=device).tril(diagonal=past)


# The layer for each name in `core.config.ACTIVATIONS`.
ACTIVATION_LAYERS = {
    "gelu": nn.GELU,
    "gelu_tanh": functools.partial(nn.GELU, approximate="tanh"),
    "relu": nn.ReLU,
    "swiglu": nn.SiLU,  # the gate's activation
}


def norm_layer(config: GPTConfig) -> nn.Module:
    """The config's normalisation over channels: LayerNorm (GPT-2) or RMSNorm (Llama)."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.n_embd, eps=config.norm_eps)
    return nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias)


class FeedForward(nn.Module):
    """act(x W_fc) W_proj; gated (SwiGLU) where W_fc holds two matrices side by side, the gate's and
    the up projection's: SiLU(x W_gate) * (x W_up) W_proj."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.gated = config.activation == "swiglu"
        hidden = config.ffn_hidden
        self.fc = nn.Linear(config.n_embd, 2 * hidden if self.gated else hidden, bias=config.bias)
        self.act = ACTIVATION_LAYERS[config.activation]()
        self.proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)  # (B, T, hidden), or (B, T, 2 hidden) gated
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            return self.dropout(self.proj(self.act(gate) * up))
        return self.dropout(self.proj(self.act(h)))


class Block(nn.Module):
    """Communication (attention) then computation (feed-forward), each optional."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.residual = config.use_residual
        norm = (lambda: norm_layer(config)) if self.residual else nn.Identity
        self.ln1, self.ln2 = norm(), norm()
        self.attn = CausalSelfAttention(config) if config.use_attention else None
        self.mlp = FeedForward(config) if config.use_feed_forward else None
        self.hook_attn_out = HookPoint()  # (B, T, C) what attention adds to the stream
        self.hook_mlp_out = HookPoint()  # (B, T, C) what the feed-forward adds
        self.hook_resid_post = HookPoint()  # (B, T, C) the residual stream after this block

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        if self.attn is not None:
            update = self.hook_attn_out(self.attn(self.ln1(x), cache, layer))
            x = x + update if self.residual else update
        if self.mlp is not None:
            update = self.hook_mlp_out(self.mlp(self.ln2(x)))
            x = x + update if self.residual else update
        return self.hook_resid_post(x)


class GPT(Hooked):
    def __init__(self, config: GPTConfig, generator: torch.Generator | None = None) -> None:
        """A freshly initialised model; its weights are drawn from `generator` (a CPU generator;
        default: torch's global random state), so a seeded generator gives the same model every time."""
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.n_embd)
        self.position_embedding = (
            nn.Embedding(config.block_size, config.n_embd) if config.position == "learned" else None
        )
        self.dropout = nn.Dropout(config.dropout)
        self.hook_embed = HookPoint()  # (B, T, C) token + position embeddings: the stream before any block
        # A block with neither attention nor feed-forward would do nothing: the bigram stages have none.
        has_blocks = config.use_attention or config.use_feed_forward
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer if has_blocks else 0))
        self.ln_f = norm_layer(config) if config.use_residual else nn.Identity()
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=config.lm_head_bias)
        if config.tie_weights:
            self.lm_head.weight = self.token_embedding.weight
        self._init_weights(generator)
        self.name_hook_points()

    def _init_weights(self, generator: torch.Generator | None) -> None:
        """Draw every weight from `generator` by the config's scheme (see `core.config.INITS`).

        gpt2: weights N(0, 0.02), biases 0, and the projections into the residual stream scaled
        down by 1/sqrt(2 * n_layer) so the stream's variance stays put.
        pytorch: PyTorch's layer defaults (the lecture's early stages), redrawn from `generator`.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear) and self.config.init == "pytorch":
                bound = 1 / math.sqrt(module.in_features)  # what kaiming_uniform_(a=sqrt(5)) draws
                nn.init.uniform_(module.weight, -bound, bound, generator=generator)
                if module.bias is not None:
                    nn.init.uniform_(module.bias, -bound, bound, generator=generator)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02, generator=generator)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                std = 1.0 if self.config.init == "pytorch" else 0.02
                nn.init.normal_(module.weight, mean=0.0, std=std, generator=generator)
        if self.config.init == "gpt2":
            for name, p in self.named_parameters():
                if name.endswith("proj.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * max(1, self.config.n_layer)),
                                    generator=generator)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        return_attention: bool = False,
        cache: KVCache | None = None,
        last_only: bool = False,
    ):
        """idx (B, T) token ids -> logits (B, T, vocab), loss (or None).

        With `return_attention`, also returns one (B, H, T, T) weight tensor per attention layer.
        With a `cache`, idx holds only the new tokens; they continue the cached positions.
        With `last_only`, logits (B, 1, vocab) of the last position alone (no loss then: it needs every
        position): the next token's, without the output layer's work elsewhere (GPT-2's: 50,257 x 768 a position).
        """
        if return_attention:
            with capture_attention(self) as patterns:
                logits, loss = self(idx, targets, cache=cache, last_only=last_only)
            return logits, loss, list(patterns.values())

        B, T = idx.shape
        past = cache.seen() if cache is not None else 0
        self.check_length(past + T)
        x = self.token_embedding(idx)  # (B, T, C)
        if self.position_embedding is not None:
            positions = torch.arange(past, past + T, device=idx.device)
            x = x + self.position_embedding(positions)  # (T, C) broadcasts over B
        x = self.hook_embed(self.dropout(x))
        x = self.run_from(x, 0, cache)
        if last_only:
            x = x[:, -1:]
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab), or (B, 1, vocab)

        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def run_from(self, x: torch.Tensor, first: int = 0, cache: KVCache | None = None) -> torch.Tensor:
        """The residual stream after the last block (B, T, C), from x (B, T, C) entering block `first`:
        the rest of a forward pass, for analyses that change the stream (or a head) at one layer."""
        for layer, block in enumerate(self.blocks):  # not blocks[first:]: a slice builds a new ModuleList each pass
            if layer >= first:
                x = block(x, cache, layer)
        return x

    def stream_names(self) -> list[str]:
        """The residual stream's hook points: the embeddings, then after each block (L + 1 names);
        name l is the stream entering block l."""
        return [self.hook_embed.name] + [block.hook_resid_post.name for block in self.blocks]

    @contextlib.contextmanager
    def explicit_attention(self) -> Iterator[None]:
        """Attention as an explicit masked softmax instead of the fused kernel, inside the block.

        For short contexts in bfloat16 on a CPU it is the faster one (PyTorch's fused CPU kernels
        have a slow bfloat16 backward). Per model, so concurrent trainings do not interfere.
        """
        layers = [block.attn for block in self.blocks if block.attn is not None]
        for attn in layers:
            attn.fused = False
        try:
            yield
        finally:
            for attn in layers:
                attn.fused = True

    def new_cache(self) -> KVCache:
        return KVCache(len(self.blocks))

    def check_length(self, n_tokens: int) -> None:
        """Raise ValueError if the model cannot read `n_tokens` at once (see GPTConfig.max_length)."""
        limit = self.config.max_length
        if limit is not None and n_tokens > limit:
            raise ValueError(f"the text has {n_tokens} tokens; this model's context is {limit} tokens "
                             "(its learned positions stop there)")

    def parameter_counts(self) -> dict[str, int]:
        """Parameters by component; a tied LM head counts only its bias (its weight is the embedding)."""

        def count(module: nn.Module | None) -> int:
            return 0 if module is None else sum(p.numel() for p in module.parameters())

        head = count(self.lm_head)
        if self.config.tie_weights:
            head -= self.lm_head.weight.numel()
        counts = {
            "token_embedding": count(self.token_embedding),
            "position_embedding": count(self.position_embedding),
            "blocks": count(self.blocks),
            "attention": sum(count(b.attn) for b in self.blocks),
            "feed_forward": sum(count(b.mlp) for b in self.blocks),
            "block_layer_norms": sum(count(b.ln1) + count(b.ln2) for b in self.blocks),
            "final_layer_norm": count(self.ln_f),
            "lm_head": head,
        }
        counts["total"] = sum(p.numel() for p in self.parameters())  # shared tensors counted once
        return counts


def capture_attention(model: GPT) -> contextlib.AbstractContextManager[dict[str, torch.Tensor]]:
    """Collect the attention weights of every layer while the block runs.

    >>> with capture_attention(model) as patterns:
    ...     model(idx)
    >>> patterns["blocks.0.attn.hook_pattern"].shape  # (B, H, T, T)

    The weights are detached; the dict keeps layer order.
    """
    return model.caching(lambda name: name.endswith("attn.hook_pattern"))
