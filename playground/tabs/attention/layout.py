"""The Attention tab's layout: the analysis on top, the tools that look inside a head below it, and
`AttentionHandlers`, every section's handlers in one object (tests call them with a session id).

A section is one module: a `Handlers` mixin of `common.AttentionBase`, a `build` that lays it out and
wires its events, and for a tool below the analysis, `CLEARED`, what a new analysis clears. A new tool
is one module and one line in `TOOLS`.
Nothing imports this module but the package's `__init__`: it is the top of the tab. Never imports
another tab.
"""

from __future__ import annotations

import gradio as gr

from playground import model_picker
from playground.context import AppContext
from playground.tabs.attention import analysis, attribution, circuits, export, knockouts, lens, patching, steps

# The tools below the analysis, top to bottom. They run the session's model on the analysed text under
# its job lock, and refuse once the model has changed since the analysis: what they show must be the
# model the heatmaps show.
TOOLS = (steps, knockouts, lens, attribution, patching, circuits, export)


class AttentionHandlers(analysis.Handlers, *(tool.Handlers for tool in TOOLS)):
    """The tab's event handlers as plain methods; `request` is a gr.Request or, in tests, a session id."""

    def reset_tools(self, request: gr.Request) -> tuple:
        """After a new analysis: its heads to pick from, and every tool's old results cleared."""
        heads = self.heads_to_pick(self._analysis(request))
        return heads, *(value for tool in TOOLS for value in tool.CLEARED.values())


def build(ctx: AppContext) -> None:
    handlers = AttentionHandlers(ctx)
    model_picker.build(ctx, "attention")
    page, analysed = analysis.build(ctx, handlers)
    shown = {tool: tool.build(ctx, handlers, page) for tool in TOOLS}
    cleared = [shown[knockouts]["heads"]] + [shown[tool][name] for tool in TOOLS for name in tool.CLEARED]
    analysed.success(handlers.reset_tools, None, cleared, api_name="attention_reset_tools",
                     api_visibility="private", **ctx.cheap())
    ctx.registry.on_free(handlers.free)
