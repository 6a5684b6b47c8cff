"""The Attention tab: every head's attention on a text, and tools that look inside a head (step by
step, knock-outs and importance, the logit lens, why a token: logit attribution, patching and a
head's circuits) with an export of it all.

A package of one module per section (see `layout`, which lays them out and wires them). The app builds
the tab with `build(ctx)`; tests and benchmarks call the sections' handlers that `AttentionHandlers(ctx)`
makes (`handlers.analysis.analyse`, `handlers.knockouts.knock_out`).
Never imports another tab.
"""

from playground.tabs.attention.layout import AttentionHandlers, build

__all__ = ["AttentionHandlers", "build"]
