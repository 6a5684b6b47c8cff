"""The Room tab: a teacher opens a room, shares its link, and watches the class. The class view: counts at the top
(joined, training, done, stuck), every learner's loss curve on one chart (one highlighted), a table of where each
learner is (paged), and a gallery with one attention map per learner for a head the teacher picks. The teacher
pushes the Train tab's setup to every learner as the lesson (hiding and locking groups of the form), exports the
class's results (CSV, JSON, the chart as a PNG), and puts learners' runs in their own Compare runs.

Every teacher event takes the room's code and teacher key (`playground.rooms.Rooms.teacher`): without them it
is refused, over the API as in the page. The view reads what the learners' trainings already computed (their
history rows and last attention snapshot): it costs the server a table's worth of reading a second.

While the room trains, the class view is drawn by the page's own script (VIEW_LOOP), not by Gradio events: every
TICK_S it POSTs the code and key to a plain route of the app (`view_route`), whose answer holds the chart's Plotly
JSON (drawn in place by a LivePlot), the counts and the table's page (drawn by a ClassBoard), and every
MAPS_TICK_S the gallery too while some of it is in the window (drawing its tiles holds a busy page for about a
second: measured, the chart's redraws waited behind it). In the browser each Gradio event costs the page's main
thread 0.3-1 s on a busy two-core host however small its outputs (`playground.class_board` has the measurement),
and a learner's new point waited behind them: with the table and the gallery on Gradio timers it reached the chart
up to 2.3-4.6 s late. Gradio events remain for what the teacher does (show, highlight, a page of maps, push,
export) and for the rare change of the learners' names (the pickers' choices), which the script signals with a
hidden button.

Public events: /open_room, /class_view, /class_maps, /push_lesson, /export_room, /room_to_compare, /close_room.
Never imports another tab: the Train tab gives its form as `ctx.lesson`, the learner's side is its own.
"""

from __future__ import annotations

import atexit
import csv
import io
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import gradio as gr
from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from core.data import CORPORA
from core.runs import RUNS_KEPT, RunRecord
from core.tokenizers import token_labels
from playground import validate
from playground.context import AppContext
from playground.figures import note_figure
from playground.figures.room import (
    class_chart_png,
    class_loss_figure,
    class_maps_figure,
)
from playground.class_board import ClassBoard
from playground.gradio_internals import PlotData, plotly_json
from playground.live_plot import LivePlot
from playground.rooms import NAME_CHARS, Lesson, Member, Progress, Room, finite, head_map, thinned
from playground.sessions import Session

COLUMNS = ("learner", "state", "step", "loss", "val loss", "answers right", "head formed by step", "last progress")
ROWS_PER_PAGE = 25
MAPS_PER_PAGE = 24
MAPS_PER_ROW = 4  # a phone's 390 px still gives each map ~80 px and its name room
CHART_POINTS = 60  # of each learner's curve on the class chart: 150 learners stay a light update
TICK_S = 1.0  # the live view's redraw: a learner's new point shows within about this
MAPS_TICK_S = 10.0  # the gallery's (maps change slowly, and they are the heavy part)
VIEW_PATH = "/room_view"
VIEW_BODY_BYTES = 1024  # a view request's JSON: a code, a key of at most KEY_CHARS, a learner's name, three numbers
# The page's side of the class view (see the module's docstring), started when the view is shown with the code and
# key typed: every TICK_S (from one request's start to the next), while the view is on screen, POST them with the
# highlighted learner and the table's page (and every MAPS_TICK_S, while the gallery is in the window, its layer,
# head and page) to VIEW_PATH, and hand the answer to the chart, the board and the gallery. A click on a learner's
# name in the table clicks a hidden button whose Gradio event highlights them (its `js` hands it the name); the names,
# at the first answer (a reload shows the view again) and whenever they change, click another (whose event updates
# the pickers' choices); a 403 (the room ended, or closed) clicks a third and ends the loop.
VIEW_LOOP = f"""(code, key) => {{
    clearTimeout(window.classView);
    if (!code || !key) return;
    const root = ((window.gradio_config && window.gradio_config.root) || ".").replace(/\\/$/, "");
    const value = (selector) => {{ const box = document.querySelector(selector); return box ? box.value : null; }};
    const whole = (selector, otherwise) => {{
        const number = parseInt(value(selector), 10);
        return isNaN(number) ? otherwise : number;
    }};
    const pick = (name) => {{
        window.classPicked = name;
        document.querySelector("#class-pick").click();
    }};
    // the gallery is asked for only while some of it is in the window: drawn, it holds a busy page ~1 s
    const inView = (element) => {{
        const box = element.getBoundingClientRect();
        return box.bottom > 0 && box.top < window.innerHeight;
    }};
    let names = null, mapsAsked = -Infinity, mapsSeen = false;
    const draw = async () => {{
        // looked up at each tick: a part of the view is drawn (and its script run) once the view is shown
        const started = performance.now(), plot = document.querySelector("#class-chart .live-plot");
        const boards = [...document.querySelectorAll("#class-view .class-board")].filter(board => board.show);
        if (plot && plot.show && boards.length === 2 && plot.offsetParent !== null) {{
            boards.forEach(board => {{ board.onpick = pick; }});
            const asked = {{code, key, highlight: value("#class-highlight input"),
                           page: whole("#class-page input", 1)}};
            const gallery = document.querySelector("#class-maps .live-plot");
            const seen = Boolean(gallery && gallery.show && inView(gallery));
            if (seen && (!mapsSeen || started - mapsAsked >= {MAPS_TICK_S * 1000:.0f})) {{
                mapsAsked = started;
                asked.maps = {{layer: whole("#class-layer input[type=number]", 0),
                               head: whole("#class-head input[type=number]", 0),
                               page: whole("#class-maps-page input", 1)}};
            }}
            mapsSeen = seen;
            try {{
                const answer = await fetch(`${{root}}{VIEW_PATH}`, {{method: "POST", cache: "no-store",
                    headers: {{"Content-Type": "application/json"}}, body: JSON.stringify(asked)}});
                if (answer.status === 403) {{ document.querySelector("#class-ended").click(); return; }}
                if (answer.ok) {{
                    const view = await answer.json(), now = JSON.stringify(view.names);
                    plot.show(view.plot);
                    boards.forEach(board => board.show(view));
                    if (view.maps) gallery.show(view.maps);
                    if (now !== names) document.querySelector("#class-names-changed").click();
                    names = now;
                }}
            }} catch (error) {{}}
        }}
        window.classView = setTimeout(draw, Math.max(0, {TICK_S * 1000:.0f} - (performance.now() - started)));
    }};
    window.classView = setTimeout(draw, 0);
}}"""
PAGE_ADDRESS = "window.location.origin + window.location.pathname"
# The teacher's browser keeps the room's code and key (its local storage), so a reload shows the class view again.
# BrowserState's secret is sent to every page: the value is no secret from that browser, and is checked as any key is.
REMEMBERED_KEY, REMEMBERED_SECRET = "attention-playground-room", "kept-in-the-teachers-own-browser"
INTRO = ("**Teach a workshop.** Open a room and share its link: each learner who opens it joins with an anonymous "
         "name. Their loss curves, answers and attention maps appear here as they train; set a lesson on the "
         "**Train** tab and push it to everyone at once.")


class RoomHandlers:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx, self.rooms, self.registry = ctx, ctx.rooms, ctx.registry
        self.scratch = Path(tempfile.mkdtemp(prefix="attention-playground-room-"))  # exports to download
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)

    def open_room(self, name: Any, server_key: Any, page: Any) -> tuple[str, str, str]:
        """Open a room named `name` (on a server with a teacher key, `server_key` must be it).

        Returns:
            (the room's code, its teacher key: keep it, it opens the class view; the learners' link, made from
            `page`, the app's address).
        """
        page = validate.text(page, "The page's address", 2000)
        if not page.startswith(("http://", "https://")):
            raise gr.Error("The page's address must start with http:// or https://.")
        room, key = self.rooms.open(name, server_key)
        return room.code, key, _learners_link(page, room.code)

    def resume(self, remembered: Any) -> tuple[str, str] | None:
        """The (code, key) this browser kept, if they still open a room (None: nothing kept, or no longer)."""
        if not (isinstance(remembered, list) and len(remembered) == 2 and all(isinstance(v, str) for v in remembered)):
            return None
        try:
            self.rooms.teacher(*remembered)
        except gr.Error:
            return None
        return remembered[0], remembered[1]

    def class_view(self, code: Any, key: Any, highlight: Any = None, page: Any = 1) -> tuple:
        """The class view of a room: (counts, the class chart, the table's page ({"headers", "data"}), the
        learners' names).

        The table's columns: learner, state (joined, training, stopped, done, refused, error, left), step, loss,
        val loss, answers right, head formed by step (the first snapshot from which a head copies: as close to
        the moment as the snapshots are, fewer on a busy server), last progress."""
        live = self.live_view(code, key, highlight, page)
        tally = live["counts"]
        counts = (f"### {validate.as_markdown(tally['title'])}\n"
                  + " · ".join(f"**{number}** {label}" for number, label in tally["figures"])
                  + (f" · {tally['paging']}" if tally["paging"] else ""))
        return counts, plotly_json(live["plot"]), live["table"], live["names"]

    def live_view(self, code: Any, key: Any, highlight: Any = None, page: Any = 1, maps: Any = None) -> dict:
        """What the page's script (VIEW_LOOP) draws every TICK_S: {"plot": the class chart's Plotly JSON,
        "counts": {"title", "figures": [[number, label], ...], "paging"}, "table": {"headers", "data"} (its page),
        "names", "highlight"}; with `maps` ({"layer", "head", "page"}) also "maps", the gallery's Plotly JSON."""
        room = self.rooms.teacher(code, key)
        page = validate.integer(page if page not in (None, "") else 1, "Page", 1, 10_000)
        everyone = self.rooms.progress(room)
        rows = [self._row(member, progress) for member, progress in everyone]
        pages = max(1, math.ceil(len(rows) / ROWS_PER_PAGE))
        page = min(page, pages)
        names = [member.name for member, _ in everyone]
        highlight = highlight if isinstance(highlight, str) and highlight in names else None
        live = {"plot": _chart(everyone, highlight).plot, "counts": self._counts(room, everyone, page, pages),
                # {"headers", "data"}: plain JSON for the page and over the API (a pandas DataFrame there comes
                # out as its printed, column-elided text)
                "table": {"headers": list(COLUMNS), "data": rows[(page - 1) * ROWS_PER_PAGE: page * ROWS_PER_PAGE]},
                "names": names, "highlight": highlight}
        if maps is not None:
            if not isinstance(maps, dict):
                raise gr.Error("The maps' settings are {\"layer\", \"head\", \"page\"}.")
            live["maps"] = self.class_maps(code, key, maps.get("layer"), maps.get("head"), maps.get("page")).plot
        return live

    def class_maps(self, code: Any, key: Any, layer: Any = 0, head: Any = 0, page: Any = 1) -> PlotData:
        """One attention map per learner (their last snapshot on their probe prompt) for head `head` of layer
        `layer`, `MAPS_PER_PAGE` learners a page."""
        room = self.rooms.teacher(code, key)
        settings = self.ctx.settings
        layer = validate.integer(layer, "Layer", 0, settings.max_layers - 1)
        head = validate.integer(head, "Head", 0, settings.max_heads - 1)
        page = validate.integer(page if page not in (None, "") else 1, "Page", 1, 10_000)
        present = room.present[(page - 1) * MAPS_PER_PAGE: page * MAPS_PER_PAGE]
        if not present:
            return plotly_json(note_figure("No learner on this page yet: share the room's link.").to_json())
        maps = [head_map(self.registry.peek(member.key), member.name, layer, head) for member in present]
        return class_maps_figure([(m.name, m.weights, m.labels) for m in maps], layer, head, columns=MAPS_PER_ROW)

    def push_lesson(self, code: Any, key: Any, hide: Any, lock: Any, *values: Any) -> str:
        """Push the Train tab's setup (the fields a teacher's link sets) to every learner in the room, with the
        groups of the form to hide and lock; a learner training now goes on, and their next Train uses it.

        Returns:
            what was pushed, in words.
        """
        room = self.rooms.teacher(code, key)
        lesson_form = self.ctx.lesson
        hide, lock = _groups(hide, "Hide"), _groups(lock, "Lock")
        form = dict(zip(lesson_form.fields, values))
        said = lesson_form.check(form, hide, lock, room.lesson)
        lesson = self.rooms.push(room, Lesson(form, hide, lock, said))
        return (f"Lesson {lesson.version} pushed to {len(room.present)} learner"
                f"{'s' if len(room.present) != 1 else ''} (their pages take it within seconds): {said}")

    def export_room(self, code: Any, key: Any, request: gr.Request) -> list[str]:
        """The room's results: the table and every learner's curves as CSV and JSON, and the class chart as a PNG.

        Returns:
            the three files' paths (room.csv, room.json, class-chart.png).
        """
        room = self.rooms.teacher(code, key)
        everyone = self.rooms.progress(room)
        folder = self.scratch / self.registry.get(request).id / time.strftime("%Y%m%d-%H%M%S")
        folder.mkdir(parents=True, exist_ok=True)
        table = io.StringIO()
        writer = csv.writer(table)
        writer.writerow(COLUMNS)
        writer.writerows(self._row(member, progress, for_file=True) for member, progress in everyone)
        (folder / "room.csv").write_text(table.getvalue(), encoding="utf-8")
        results = {"room": room.name, "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "learners": [_as_json(member, progress) for member, progress in everyone]}
        (folder / "room.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
        curves = [(member.name, *thinned(progress.curve, 200)) for member, progress in everyone if progress.curve[0]]
        (folder / "class-chart.png").write_bytes(class_chart_png(curves, f"{room.name}: training loss"))
        return [str(folder / name) for name in ("room.csv", "room.json", "class-chart.png")]

    def room_to_compare(self, code: Any, key: Any, names: Any, request: gr.Request) -> str:
        """Put up to four learners' runs (by name) in your Compare runs (Train tab), titled with their names.

        Returns:
            what was added.
        """
        room = self.rooms.teacher(code, key)
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise gr.Error("Choose the learners whose runs to compare.")
        if not 1 <= len(names) <= RUNS_KEPT:
            raise gr.Error(f"Choose 1 to {RUNS_KEPT} learners: Compare runs shows {RUNS_KEPT} runs at most.")
        by_name = {member.name: member for member in room.present}
        missing = [name for name in names if name not in by_name]
        if missing:
            raise gr.Error(f"No learner of this room is called {missing[0][:40]}.")
        teacher = self.registry.get(request)
        added = [name for name in names if _compare_record(teacher, self.registry.peek(by_name[name].key), name)]
        if not added:
            return "None of them has a trained model to compare yet."
        return (f"Added to Compare runs on the Train tab: {', '.join(added)}."
                + ("" if len(added) == len(names) else " The others have no trained model yet."))

    def close_room(self, code: Any, key: Any) -> str:
        """End the room: learners keep their models; their pages stop following it.

        Returns:
            what happened.
        """
        room = self.rooms.teacher(code, key)
        self.rooms.close(room)
        return f"Room {validate.as_markdown(room.name)} is closed. Its learners keep their models."

    def free(self, session: Session) -> None:
        shutil.rmtree(self.scratch / session.id, ignore_errors=True)

    def _counts(self, room: Room, everyone: list[tuple[Member, Progress]], page: int, pages: int) -> dict:
        """The counts at the top of the view: {"title", "figures": [[number, label], ...], "paging"}."""
        present = [(member, progress) for member, progress in everyone if progress.state != "left"]
        lesson = f" · lesson {room.lesson.version}" if room.lesson is not None else ""
        return {"title": f"Room {room.name} · code {room.code}{lesson}", "figures": [
            [len(present), "joined"],
            [sum(progress.state == "training" for _, progress in present), "training"],
            [sum(progress.state == "done" for _, progress in present), "done"],
            [sum(self.rooms.stuck(member, progress) for member, progress in present), "stuck"],
            [sum(progress.formed_at is not None for _, progress in present), "with a copying head"],
        ], "paging": f"table page {page} of {pages}" if pages > 1 else ""}

    def _row(self, member: Member, progress: Progress, for_file: bool = False) -> list:
        answers = None if progress.answers is None else (
            round(progress.answers, 4) if for_file else f"{progress.answers:.0%}")
        waited = time.monotonic() - member.moved
        stuck = self.rooms.stuck(member, progress)
        last = (round(waited) if for_file else
                f"{'⚠️ stuck, ' if stuck else ''}{_ago(waited)}" if progress.state != "left" else "")
        state = progress.state + (f": {progress.problem[:600 if for_file else 80]}" if progress.problem else "")
        return [member.name, state, progress.step, _rounded(progress.loss), _rounded(progress.val_loss), answers,
                "" if progress.formed_at is None else progress.formed_at, last]


def _chart(everyone: list[tuple[Member, Progress]], highlight: Any) -> PlotData:
    """The class chart: every learner's curve, thinned to CHART_POINTS, `highlight` (a learner's name) drawn last."""
    highlight = highlight if isinstance(highlight, str) and highlight in {m.name for m, _ in everyone} else None
    curves = [(member.name, *thinned(progress.curve, CHART_POINTS)) for member, progress in everyone
              if progress.curve[0]]
    longest = max((progress.max_steps for _, progress in everyone), default=0)
    return class_loss_figure(curves, highlight, longest or None)


def _compare_record(teacher: Session, learner: Session | None, name: str) -> bool:
    """Keep `learner`'s model's run in the teacher's runs, titled `name`; False if they have none."""
    trained = None if learner is None else learner.trained
    if trained is None or trained.source is not None or not trained.history:
        return False
    movie = trained.movie
    maps = movie.frames[-1].maps if movie is not None and movie.frames else None
    labels = token_labels(trained.tokenizer, movie.probe_ids) if movie is not None else []
    built_in = (learner.kept_form or {}).get("corpus") in CORPORA  # a learner's own text is never shown
    teacher.runs.keep(RunRecord.of(
        teacher.runs.new_number(), trained.model.config, trained.corpus_name if built_in else "their own text",
        trained.history, trained.train_config.to_dict() if trained.train_config else {},
        labels if built_in else [f"#{i}" for i in range(len(labels))], maps, title=name))
    return True


def _as_json(member: Member, progress: Progress) -> dict:
    return {"name": member.name, "state": progress.state, "step": progress.step, "max_steps": progress.max_steps,
            "loss": finite(progress.loss), "val_loss": finite(progress.val_loss), "answers_right": progress.answers,
            "head_formed_at": progress.formed_at, "problem": progress.problem,
            "train_curve": {"steps": list(progress.curve[0]), "loss": [finite(v) for v in progress.curve[1]]},
            "val_curve": {"steps": list(progress.val_curve[0]), "loss": [finite(v) for v in progress.val_curve[1]]}}


def _groups(value: Any, name: str) -> tuple[str, ...]:
    if value in (None, ""):
        return ()
    if not isinstance(value, list) or len(value) > 10 or not all(isinstance(group, str) for group in value):
        raise gr.Error(f"{name} takes a list of the form's groups.")
    return tuple(dict.fromkeys(value))


def _learners_link(page: str, code: str) -> str:
    return f"{page}?room={code[:4]}-{code[4:]}"


def _rounded(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _ago(seconds: float) -> str:
    return "just now" if seconds < 5 else f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def build(ctx: AppContext) -> RoomHandlers:
    handlers = RoomHandlers(ctx)
    ctx.registry.on_free(handlers.free)
    groups = list(ctx.lesson.groups) if ctx.lesson is not None else []
    gr.Markdown(INTRO, elem_id="room-intro")
    with gr.Row(equal_height=False):
        room_name = gr.Textbox(label="Room name", placeholder="Tuesday's workshop", max_length=240, scale=3,
                               elem_id="room-name-input")
        server_key = gr.Textbox(label="This server's teacher key", type="password", scale=2,
                                visible=bool(ctx.settings.teacher_key), elem_id="server-key")
        open_btn = gr.Button("Open a room", variant="primary", scale=1, elem_id="room-open")
    with gr.Row(equal_height=False):
        code_box = gr.Textbox(label="Room code", max_length=32, scale=1, elem_id="room-code")
        key_box = gr.Textbox(label="Teacher key", type="password", max_length=200, scale=2, elem_id="teacher-key",
                             info="Only you have it: with the code it opens this class view in any browser.")
        show_btn = gr.Button("Show the class view", scale=1, elem_id="room-show")
    link_box = gr.Textbox(label="The learners' link", buttons=["copy"], interactive=False, visible=False,
                          elem_id="room-link", info="Each learner who opens it joins the room.")
    with gr.Column(visible=False, elem_id="class-view") as view:
        ClassBoard("counts", elem_id="class-counts-board")
        # read by the page's script, no event's input: interactive said outright (Gradio would draw it disabled)
        highlight = gr.Dropdown([], value=None, label="Highlight a learner (or click their row)", interactive=True,
                                allow_custom_value=False, elem_id="class-highlight")
        LivePlot(note_figure("No learner has trained yet."), label="Every learner's training loss",
                 elem_id="class-chart")
        ClassBoard("table", elem_id="class-board")
        with gr.Row():
            gr.Number(1, precision=0, minimum=1, label=f"Table page ({ROWS_PER_PAGE} learners a page)",
                      interactive=True, scale=0, min_width=200, elem_id="class-page")  # read by the script too
        with gr.Row():
            layer = gr.Slider(0, ctx.settings.max_layers - 1, value=0, step=1, label="Layer", elem_id="class-layer")
            head = gr.Slider(0, ctx.settings.max_heads - 1, value=0, step=1, label="Head", elem_id="class-head")
            maps_page = gr.Number(1, precision=0, minimum=1, label="Maps page", elem_id="class-maps-page")
        maps = LivePlot(note_figure("Each learner's map of the head you pick appears here."),
                        label="One attention map per learner", elem_id="class-maps")
        with gr.Accordion("Push a lesson", open=True, elem_id="room-lesson"):
            gr.Markdown("Set up the **Train** tab as the lesson (a preset, any field), then push it: every "
                        "learner's form changes at once, with a banner saying what changed. A learner who is "
                        "training goes on; their next Train uses the lesson.", elem_classes="caps-note")
            with gr.Row():
                hide = gr.CheckboxGroup(groups, label="Hide these groups of the form", elem_id="lesson-hide")
                lock = gr.CheckboxGroup(groups, label="Lock these", elem_id="lesson-lock")
            push_btn = gr.Button("Push the Train tab's setup to every learner", variant="primary",
                                 elem_id="lesson-push")
            push_note = gr.Markdown(elem_id="lesson-note")
        with gr.Accordion("Results", open=False, elem_id="room-results"):
            export_btn = gr.Button("Export the room (CSV, JSON, chart PNG)", elem_id="room-export")
            files = gr.File(label="The room's results", file_count="multiple", interactive=False,
                            elem_id="room-files")
            with gr.Row(equal_height=False):
                compared = gr.Dropdown([], value=[], multiselect=True, max_choices=RUNS_KEPT, scale=3,
                                       label=f"Learners to compare (up to {RUNS_KEPT})", elem_id="room-compare-pick")
                compare_btn = gr.Button("Put them in Compare runs (Train tab)", scale=1, elem_id="room-compare")
            compare_note = gr.Markdown(elem_id="room-compare-note")
        close_btn = gr.Button("Close the room", variant="stop", size="sm", elem_id="room-close")
    room_note = gr.Markdown(elem_id="room-status")
    # The page script's signals (VIEW_LOOP), out of sight: a learner's name clicked in the table, new names, the end.
    with gr.Row(elem_classes="room-signals"):
        picked = gr.Textbox(show_label=False, container=False, max_length=NAME_CHARS, elem_id="class-picked")
        pick = gr.Button("Highlight the learner clicked", elem_id="class-pick")
        names_changed = gr.Button("The learners' names changed", elem_id="class-names-changed")
        ended = gr.Button("The room ended", elem_id="class-ended")
    names = gr.State([])

    cheap, quiet = ctx.cheap(), dict(**ctx.cheap(), api_visibility="private", show_progress="hidden")
    credentials = [code_box, key_box]

    def pickers(code: Any, key: Any, known: list[str]) -> tuple:
        """The learners' names in the pickers (highlight, compare), changed only when they changed: an update
        closes a list the teacher has open."""
        now = handlers.class_view(code, key)[3]
        return (gr.skip(),) * 3 if now == known else (now, gr.update(choices=now), gr.update(choices=now))

    remembered = gr.BrowserState(None, storage_key=REMEMBERED_KEY, secret=REMEMBERED_SECRET)

    def come_back(kept: Any, typed: Any) -> tuple:
        """The class view this browser kept open, shown again (a reload on the projector), unless a code is typed."""
        resumed = None if typed else handlers.resume(kept)
        if resumed is None:
            return gr.skip(), gr.skip(), gr.skip(), (None if kept is not None and not typed else gr.skip())
        return (*resumed, gr.update(visible=True), gr.skip())

    # Asked when a tab is picked, after a round trip: a BrowserState reads its storage once its tab is drawn, and
    # the Room tab is not drawn until it is first picked.
    ctx.tabs.select(lambda: None, None, None, **quiet).then(
        come_back, [remembered, code_box], [code_box, key_box, view, remembered], **quiet
    ).then(None, credentials, None, js=VIEW_LOOP)
    opened = open_btn.click(handlers.open_room, [room_name, server_key, link_box], [code_box, key_box, link_box],
                            api_name="open_room", js=f"(name, key, page) => [name, key, {PAGE_ADDRESS}]", **cheap)
    opened.success(lambda: gr.update(visible=True), None, link_box, **quiet)
    pickers_of = dict(fn=pickers, inputs=[*credentials, names], outputs=[names, highlight, compared])
    for started in (opened, show_btn.click(**pickers_of, api_visibility="private", **cheap)):
        started.success(lambda code, key: (gr.update(visible=True), "", [code, key]), credentials,
                        [view, room_note, remembered], **quiet)
        started.success(None, credentials, None, js=VIEW_LOOP)
    names_changed.click(**pickers_of, **quiet)
    pick.click(_picked_name, picked, highlight, js="(name) => window.classPicked || name", **quiet)
    ended.click(lambda: (gr.update(visible=False), "The room has ended (closed, or idle too long).", None), None,
                [view, room_note, remembered], **quiet)
    gr.api(handlers.class_view, api_name="class_view", **cheap)
    maps_inputs = [*credentials, layer, head, maps_page]
    gr.on([layer.release, head.release, maps_page.submit, show_btn.click], handlers.class_maps,
          maps_inputs, maps, api_name="class_maps", **{**quiet, "api_visibility": "public"})
    lesson_fields = list(ctx.lesson.fields.values()) if ctx.lesson is not None else []
    push_btn.click(handlers.push_lesson, [*credentials, hide, lock, *lesson_fields], push_note, api_name="push_lesson",
                   **cheap)
    export_btn.click(handlers.export_room, credentials, files, api_name="export_room", **cheap)
    compare_btn.click(handlers.room_to_compare, [*credentials, compared], compare_note, api_name="room_to_compare",
                      **cheap)
    close_btn.click(handlers.close_room, credentials, room_note, api_name="close_room", **cheap).success(
        lambda: (gr.update(visible=False), None), None, [view, remembered], **quiet)
    ctx.routes.append(view_route(handlers))
    return handlers


def view_route(handlers: RoomHandlers) -> APIRoute:
    """The route the teacher's page draws the class view from (VIEW_LOOP): POST {"code", "key", "highlight",
    "page", "maps"?}, answered with `RoomHandlers.live_view`'s JSON; 403 with the words a wrong key gets over the
    API, 400 for a body that is no such JSON or asks for what is not there, 413 for one longer than VIEW_BODY_BYTES
    (read no further). The view is made in a worker thread, as an event's is, not on the server's event loop."""

    async def room_view(request: Request) -> JSONResponse:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > VIEW_BODY_BYTES:
                return JSONResponse({"error": f"A view request is at most {VIEW_BODY_BYTES} bytes."}, 413)
        try:
            asked = json.loads(body)
        except ValueError:  # not JSON, or not UTF-8
            asked = None
        if not isinstance(asked, dict):
            return JSONResponse({"error": "A view request is a JSON object: code, key, highlight, page, maps."}, 400)
        code, key = asked.get("code"), asked.get("key")
        try:
            await run_in_threadpool(handlers.rooms.teacher, code, key)
        except gr.Error as error:
            return JSONResponse({"error": error.message}, 403)
        try:
            live = await run_in_threadpool(handlers.live_view, code, key, asked.get("highlight"), asked.get("page"),
                                           asked.get("maps"))
        except gr.Error as error:
            return JSONResponse({"error": error.message}, 400)
        return JSONResponse(live, headers={"Cache-Control": "no-store"})

    return APIRoute(VIEW_PATH, room_view, methods=["POST"])


def _picked_name(name: Any) -> Any:
    """The learner's name the page's script sends when their row is clicked: any request's value, so a learner's
    name or nothing (the picker then stays as it is)."""
    return name if isinstance(name, str) and 0 < len(name) <= NAME_CHARS else gr.skip()
