"""Hook points: named places in a model where a function can read or replace a tensor as it passes,
attached for the length of a `with` (TransformerLens's HookPoint and HookedRootModule, cut down).

    with model.hooks([("blocks.0.attn.hook_z", knock_out)]):    # fn(tensor, hook) -> tensor or None
        logits, loss = model(idx, targets)
    logits = model.run_with_hooks(idx, fwd_hooks=[(lambda name: name.endswith("hook_z"), fn)])
    logits, cache = model.run_with_cache(idx, names=["hook_embed", "blocks.0.attn.hook_pattern"])
    cache["blocks.0.attn.hook_pattern"]                        # detached, batch first, as it passed
    with model.caching(lambda name: name.endswith("hook_resid_post")) as cache:   # around any call
        loss = model(idx, targets)[1]

A hook function gets the tensor and the `HookPoint` (its `name` says where); what it returns, if not
None, goes on in the tensor's place. Hooks leave with the `with` block, whether it ends or raises.
This module is the one place that registers PyTorch module hooks: every analysis goes through it.

Imports torch only. Never imports the model, the analysis, gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

HookFn = Callable[[torch.Tensor, "HookPoint"], torch.Tensor | None]
# Where a hook goes: a hook point's full name, or a test of names (every point it accepts gets the hook).
Where = str | Callable[[str], bool]


class HookPoint(nn.Identity):
    """A named place in the model where hooks can look at (or change) a tensor; no hook, no cost."""

    name: str = ""  # its full name in the model, e.g. "blocks.0.attn.hook_pattern" (set by `Hooked`)

    @property
    def active(self) -> bool:
        """Whether any hook is attached: a model may skip work nobody looks at (fused attention)."""
        return bool(self._forward_hooks)

    def add_hook(self, fn: HookFn) -> torch.utils.hooks.RemovableHandle:
        """Call fn(output, self) on every forward pass; a tensor it returns replaces the output."""
        return self.register_forward_hook(lambda _module, _inputs, output: fn(output, self))


class Hooked(nn.Module):
    """A model whose hook points are named by where they sit (call `name_hook_points()` once built) and
    whose forward pass returns the logits first."""

    def name_hook_points(self) -> None:
        for name, point in self.hook_points().items():
            point.name = name

    def hook_points(self) -> dict[str, HookPoint]:
        """Every hook point by name, in the order a forward pass meets them, e.g. {'hook_embed': ..., ...}."""
        return {name: m for name, m in self.named_modules() if isinstance(m, HookPoint)}

    def select(self, where: Where | Iterable[str]) -> dict[str, HookPoint]:
        """The hook points `where` names: one name, several, or a test of names. A name that is no hook
        point is refused (ValueError listing the valid ones), rather than silently hooking nothing."""
        points = self.hook_points()
        if callable(where):
            return {name: point for name, point in points.items() if where(name)}
        names = [where] if isinstance(where, str) else list(where)
        unknown = [name for name in names if name not in points]
        if unknown:
            raise ValueError(f"no hook point named {', '.join(map(repr, unknown))}; this model's hook points "
                             f"are: {', '.join(points)}")
        return {name: points[name] for name in names}

    @contextlib.contextmanager
    def hooks(self, fwd_hooks: Iterable[tuple[Where, HookFn]]) -> Iterator[None]:
        """Attach each (where, fn) for the length of the `with` block; all are removed after, even on error."""
        chosen = [(point, fn) for where, fn in fwd_hooks for point in self.select(where).values()]
        handles = []
        try:
            for point, fn in chosen:
                handles.append(point.add_hook(fn))
            yield
        finally:
            for handle in handles:
                handle.remove()

    @contextlib.contextmanager
    def caching(self, names: Where | Iterable[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """A dict filled, while the block runs, with each named point's tensor (detached) by its name, in
        the order the forward pass met them; names None caches every point. A point met twice keeps the last."""
        cache: dict[str, torch.Tensor] = {}

        def save(tensor: torch.Tensor, hook: HookPoint) -> None:
            cache[hook.name] = tensor.detach()

        chosen = self.select(names if names is not None else (lambda _name: True))
        with self.hooks([(name, save) for name in chosen]):
            yield cache

    def run_with_hooks(self, idx: torch.Tensor, fwd_hooks: Iterable[tuple[Where, HookFn]] = ()) -> torch.Tensor:
        """The logits of a forward pass on idx with `fwd_hooks` attached for it alone."""
        with self.hooks(fwd_hooks):
            return self(idx)[0]

    def run_with_cache(self, idx: torch.Tensor, names: Where | Iterable[str] | None = None
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(logits, cache) of a forward pass on idx: the cache is `caching(names)`'s dict."""
        with self.caching(names) as cache:
            logits = self(idx)[0]
        return logits, cache
