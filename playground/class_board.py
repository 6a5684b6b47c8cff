"""The class view's counts and table, drawn in place by the teacher's page script: `ClassBoard`.

Why not a gr.Markdown and a gr.Dataframe that a Gradio timer refreshes: every Gradio event costs the page's main
thread about 0.3-1 s on a busy two-core host, however small its outputs (Gradio's loading states walk the page's
~400 components, and its status trackers redraw). Measured in Chromium with a CPU profile of the teacher's page in
a room of ten training learners: 7.1 s of 52 s in Gradio's `update_loading_stati_state`, 2.6 s more in its status
trackers, from one table refresh every 4 s and one gallery refresh every 10 s. The class chart's redraw waited
behind them, and a learner's new point reached it up to 2.3-4.6 s late. So the Room tab's page script
(`playground.tabs.room.VIEW_LOOP`) asks one plain route for the chart, the counts and the table every second and
hands them to the chart (a LivePlot) and to this board: no Gradio event while the room trains.

A board is one of its two parts (`part`): the counts, at the top of the view, or the table, under the chart. Its
value is unused; the script calls `show(answer)` on each `.class-board` with {"counts": {"title", "figures":
[[number, label], ...], "paging"}, "table": {"headers", "data"}, "highlight"}, and each draws its part. It
writes text nodes only: the names are the learners' own, never HTML. Each learner's name is a button (a click, or
Enter from the keyboard) that calls the board's `onpick(name)`, which the page script sets. A name button that
has the keyboard's focus keeps it when the table is drawn again.

Never imports core or a tab: a component, used by the Room tab.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

PARTS = {
    "counts": '<div class="class-board"><div class="class-counts" id="class-counts"></div></div>',
    "table": '<div class="class-board"><div class="class-table-scroll">'
             '<table id="class-table"><thead></thead><tbody></tbody></table></div></div>',
}
# A phone scrolls the table sideways rather than breaking its headers letter by letter.
STYLE = """
.class-board h2 { margin: 0 0 4px; font-size: 1.15em; font-weight: 600; }
.class-board p { margin: 0 0 8px; }
.class-table-scroll { overflow-x: auto; }
.class-board table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 0.92em; }
.class-board th, .class-board td { padding: 4px 10px; border-bottom: 1px solid var(--border-color-primary);
                                   text-align: left; white-space: nowrap; }
/* The body's text colour, underlined: the theme's link colour is too light on white for a name (axe). */
.class-board button.class-learner { background: none; border: 0; padding: 0; color: var(--body-text-color);
                                    text-decoration: underline; cursor: pointer; font: inherit; }
.class-board button.class-learner[aria-pressed="true"] { font-weight: 700; }
"""
DRAW = """
const board = element.querySelector(".class-board");
const counts = board.querySelector(".class-counts"), table = board.querySelector("table");
const text = (tag, words) => { const node = document.createElement(tag); node.textContent = words ?? ""; return node; };
board.show = (answer) => {
    if (counts) {
        const tally = answer.counts, line = document.createElement("p");
        tally.figures.forEach(([number, label], i) => line.append(i ? " · " : "", text("strong", String(number)),
                                                                  ` ${label}`));
        if (tally.paging) line.append(` · ${tally.paging}`);
        counts.replaceChildren(text("h2", tally.title), line);
    }
    if (!table) return;
    const focused = document.activeElement && table.contains(document.activeElement)
        ? document.activeElement.textContent : null;
    const head = document.createElement("tr");
    for (const name of answer.table.headers) { const th = text("th", name); th.scope = "col"; head.append(th); }
    const rows = answer.table.data.map(([name, ...rest]) => {
        const row = document.createElement("tr"), cell = document.createElement("td"), pick = text("button", name);
        pick.type = "button";
        pick.className = "class-learner";
        pick.setAttribute("aria-pressed", String(name === answer.highlight));
        pick.addEventListener("click", () => board.onpick && board.onpick(name));
        cell.append(pick);
        row.append(cell, ...rest.map(value => text("td", value === null ? "" : String(value))));
        return row;
    });
    table.tHead.replaceChildren(head);
    table.tBodies[0].replaceChildren(...rows);
    if (focused !== null) {
        const again = [...table.querySelectorAll("button.class-learner")].find(b => b.textContent === focused);
        if (again) again.focus();
    }
};
"""


class ClassBoard(gr.HTML):
    """The counts or the table of the class view (`part`: a key of PARTS), drawn by `show(answer)` in the page (see
    the module docstring)."""

    def __init__(self, part: str, *, elem_id: str, **kwargs: Any) -> None:
        super().__init__(value=None, html_template=PARTS[part], css_template=STYLE, js_on_load=DRAW, elem_id=elem_id,
                         container=False, padding=False, apply_default_css=False, **kwargs)

    def api_info(self) -> dict[str, Any]:
        return {"type": "null"}

    def example_payload(self) -> Any:
        return None

    def example_value(self) -> Any:
        return None
