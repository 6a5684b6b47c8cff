"""The Attention tab's layout: the analysis on top, the tools that look inside a head below it, the
export last, and `AttentionHandlers`, which makes every section's handlers, each given what it depends
on (tests call them with a session id string instead of a gr.Request).

A section is one module: a `Handlers` class made with the app's context and the sessions' analyses
(`common.Analyses`), a `build` that lays it out and wires its events, and for a section below the
analysis, `CLEARED`, what a new analysis clears. A tool's handlers also hand the export their part of
its JSON (`exported`). A new tool is one module and one line in `TOOLS`.
Nothing imports this module but the package's `__init__`: it is the top of the tab. Never imports
another tab.
"""

from __future__ import annotations

from types import ModuleType

import gradio as gr

from playground import model_picker
from playground.context import AppContext
from playground.tabs.attention import analysis, attribution, circuits, export, knockouts, lens, patching, steps
from playground.tabs.attention.common import Analyses

# The tools below the analysis, top to bottom. They run the session's model on the analysed text under
# its job lock, and refuse once the model has changed since the analysis: what they show must be the
# model the heatmaps show. The export, below them, gathers what each found.
TOOLS = (steps, knockouts, lens, attribution, patching, circuits)
BELOW = (*TOOLS, export)  # every section below the analysis, top to bottom: a new analysis clears them


class AttentionHandlers:
    """The tab's sections, made in the order of their dependencies; the wiring and the tests call each
    section's handlers (`handlers.knockouts.knock_out`), where `request` is a gr.Request or, in tests, a
    session id:
    - `analyses`: the sessions' analyses, as every section reads them,
    - `analysis`: Analyse, the pickers and the views on top,
    - each tool of `TOOLS`, under its module's name (`handlers.steps`, ...), and all of them in `tools`,
    - `export`: the files, given the tools whose results its JSON gathers.
    """

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.analyses = Analyses(ctx)
        self.analysis = analysis.Handlers(ctx, self.analyses)
        self.tools = {tool: tool.Handlers(ctx, self.analyses) for tool in TOOLS}
        for tool, handlers in self.tools.items():
            setattr(self, _name(tool), handlers)
        self.export = export.Handlers(ctx, self.analyses, list(self.tools.values()))

    def reset_tools(self, request: gr.Request) -> tuple:
        """After a new analysis: its heads to pick from, and every tool's old results cleared."""
        heads = self.tools[knockouts].heads_to_pick(self.analyses.last(request))
        return heads, *(value for section in BELOW for value in section.CLEARED.values())


def _name(section: ModuleType) -> str:
    """A section's name: its module's (`knockouts`)."""
    return section.__name__.rpartition(".")[2]


def build(ctx: AppContext) -> None:
    handlers = AttentionHandlers(ctx)
    model_picker.build(ctx, "attention")
    page, analysed = analysis.build(ctx, handlers.analysis)
    shown = {tool: tool.build(ctx, handlers.tools[tool], page) for tool in TOOLS}
    shown[export] = export.build(ctx, handlers.export, page)
    cleared = [shown[knockouts]["heads"]] + [shown[section][name] for section in BELOW for name in section.CLEARED]
    analysed.success(handlers.reset_tools, None, cleared, api_name="attention_reset_tools",
                     api_visibility="private", **ctx.cheap())
    ctx.registry.on_free(handlers.export.free)
