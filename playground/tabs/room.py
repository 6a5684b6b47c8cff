"""The Room tab: a teacher opens a room, shares its link, and watches the class. The class view: counts at the top
(joined, training, done, stuck), every learner's loss curve on one chart (one highlighted), a table of where each
learner is (paged), and a gallery with one attention map per learner for a head the teacher picks. The teacher
pushes the Train tab's setup to every learner as the lesson (hiding and locking groups of the form), exports the
class's results (CSV, JSON, the chart as a PNG), and puts learners' runs in their own Compare runs.

Every teacher event takes the room's code and teacher key (`playground.rooms.Rooms.teacher`): without them it
is refused, over the API as in the page. The view reads what the learners' trainings already computed (their
history rows and last attention snapshot): it costs the server a table's worth of reading a second.

The chart is redrawn every TICK_S by the page's own script (CHART_LOOP: a POST of the code and key to a plain
route of the app, `chart_route`, answered with the chart's Plotly JSON, drawn in place by the LivePlot), not by a
Gradio event: in the browser each Gradio event costs ~100 ms of the page's main thread however small its outputs
are (it updates the loading state of the page's ~400 components), so one a second kept a teacher's page busy most
of the time on a loaded laptop, and a learner's new point reached the chart 1.5-3 s late. Counts and table come every
TABLE_TICK_S through Gradio, the gallery every MAPS_TICK_S.

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
from playground.gradio_internals import PlotData
from playground.live_plot import LivePlot
from playground.rooms import Lesson, Member, Progress, Room, finite, head_map, thinned
from playground.sessions import Session

COLUMNS = ("learner", "state", "step", "loss", "val loss", "answers right", "head formed by step", "last progress")
ROWS_PER_PAGE = 25
MAPS_PER_PAGE = 24
MAPS_PER_ROW = 4  # a phone's 390 px still gives each map ~80 px and its name room
CHART_POINTS = 60  # of each learner's curve on the class chart: 150 learners stay a light update
TICK_S = 1.0  # the chart's redraw: a learner's new point shows within about this
# The counts' and the table's refresh, and the gallery's (maps change slowly, and they are the heavy part): Gradio
# events, each ~0.3-0.4 s of the page's main thread at ten learners however small (its loading states and inputs walk
# the page's components), which the chart's redraw waits behind: rare enough to leave the chart its second.
TABLE_TICK_S = 4.0
MAPS_TICK_S = 10.0
CHART_PATH = "/room_chart"
CHART_BODY_BYTES = 1024  # a chart request's JSON: a code, a key of at most KEY_CHARS, a learner's name
# The page's side of the chart (see the module's docstring), started when the class view is shown with the code and
# key typed: every TICK_S (from one request's start to the next), while the chart is on screen, POST them with the
# highlighted learner to CHART_PATH and hand the answer to the chart (a LivePlot) to draw. A 403 (the room ended,
# or closed) ends it.
CHART_LOOP = f"""(code, key) => {{
    clearTimeout(window.classChart);
    if (!code || !key) return;
    const root = ((window.gradio_config && window.gradio_config.root) || ".").replace(/\\/$/, "");
    const draw = async () => {{
        const started = performance.now(), plot = document.querySelector("#class-chart .live-plot");
        if (plot && plot.show && plot.offsetParent !== null) {{
            const highlight = document.querySelector("#class-highlight input");
            try {{
                const answer = await fetch(`${{root}}{CHART_PATH}`, {{method: "POST", cache: "no-store",
                    headers: {{"Content-Type": "application/json"}},
                    body: JSON.stringify({{code, key, highlight: highlight ? highlight.value : null}})}});
                if (answer.status === 403) return;
                if (answer.ok) plot.show((await answer.json()).plot);
            }} catch (error) {{}}
        }}
        window.classChart = setTimeout(draw, Math.max(0, {TICK_S * 1000:.0f} - (performance.now() - started)));
    }};
    window.classChart = setTimeout(draw, 0);
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
        return self.class_table(code, key, highlight, page, chart=True)

    def class_table(self, code: Any, key: Any, highlight: Any = None, page: Any = 1, chart: bool = False) -> tuple:
        """`class_view`, the chart left as it is unless `chart` (the page's script draws it: CHART_LOOP)."""
        room = self.rooms.teacher(code, key)
        page = validate.integer(page if page not in (None, "") else 1, "Page", 1, 10_000)
        everyone = self.rooms.progress(room)
        rows = [self._row(member, progress) for member, progress in everyone]
        pages = max(1, math.ceil(len(rows) / ROWS_PER_PAGE))
        page = min(page, pages)
        shown = rows[(page - 1) * ROWS_PER_PAGE: page * ROWS_PER_PAGE]
        # the table as {"headers", "data"}: what the Dataframe shows, and plain JSON over the API (a pandas
        # DataFrame there comes out as its printed, column-elided text)
        return (self._counts(room, everyone, page, pages), _chart(everyone, highlight) if chart else gr.skip(),
                {"headers": list(COLUMNS), "data": shown}, [member.name for member, _ in everyone])

    def class_chart(self, code: Any, key: Any, highlight: Any = None) -> PlotData:
        """The class chart alone (what `chart_route` answers the page's script with every TICK_S)."""
        return _chart(self.rooms.progress(self.rooms.teacher(code, key)), highlight)

    def class_maps(self, code: Any, key: Any, layer: Any = 0, head: Any = 0, page: Any = 1):
        """One attention map per learner (their last snapshot on their probe prompt) for head `head` of layer
        `layer`, `MAPS_PER_PAGE` learners a page."""
        room = self.rooms.teacher(code, key)
        settings = self.ctx.settings
        layer = validate.integer(layer, "Layer", 0, settings.max_layers - 1)
        head = validate.integer(head, "Head", 0, settings.max_heads - 1)
        page = validate.integer(page if page not in (None, "") else 1, "Page", 1, 10_000)
        present = room.present[(page - 1) * MAPS_PER_PAGE: page * MAPS_PER_PAGE]
        if not present:
            return note_figure("No learner on this page yet: share the room's link.")
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

    def _counts(self, room: Room, everyone: list[tuple[Member, Progress]], page: int, pages: int) -> str:
        present = [(member, progress) for member, progress in everyone if progress.state != "left"]
        training = sum(progress.state == "training" for _, progress in present)
        done = sum(progress.state == "done" for _, progress in present)
        stuck = sum(self.rooms.stuck(member, progress) for member, progress in present)
        formed = sum(progress.formed_at is not None for _, progress in present)
        lesson = f" · lesson {room.lesson.version}" if room.lesson is not None else ""
        paging = f" · table page {page} of {pages}" if pages > 1 else ""
        return (f"### Room {validate.as_markdown(room.name)} · code `{room.code}`{lesson}\n"
                f"**{len(present)}** joined · **{training}** training · **{done}** done · **{stuck}** stuck · "
                f"**{formed}** with a copying head{paging}")

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
        counts = gr.Markdown(elem_id="class-counts")
        highlight = gr.Dropdown([], value=None, label="Highlight a learner (or click their row)",
                                allow_custom_value=False, elem_id="class-highlight")
        chart = LivePlot(note_figure("No learner has trained yet."), label="Every learner's training loss",
                         elem_id="class-chart")
        # not wrapped: a phone scrolls it sideways (wrapped, its headers broke letter by letter)
        table = gr.Dataframe(headers=list(COLUMNS), interactive=False, elem_id="class-table")
        with gr.Row():
            page = gr.Number(1, precision=0, minimum=1, label=f"Table page ({ROWS_PER_PAGE} learners a page)",
                             scale=0, min_width=200, elem_id="class-page")
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
    ticks, maps_ticks, names = gr.Timer(TABLE_TICK_S, active=False), gr.Timer(MAPS_TICK_S, active=False), gr.State([])

    cheap, quiet = ctx.cheap(), dict(**ctx.cheap(), api_visibility="private", show_progress="hidden")
    credentials = [code_box, key_box]
    view_inputs = [*credentials, highlight, page, names]
    view_outputs = [counts, chart, table, names, highlight, compared]

    def shown(on: bool) -> tuple:
        return gr.update(visible=on), gr.Timer(active=on), gr.Timer(active=on)

    def refresh(code: Any, key: Any, highlight_name: Any, table_page: Any, known: list[str], chart: bool = True
                ) -> tuple:
        """The class view, and the pickers' choices only when the names changed (a refresh closes an open list)."""
        *shown_view, now = handlers.class_table(code, key, highlight_name, table_page, chart=chart)
        choices = (gr.skip(), gr.skip()) if now == known else (gr.update(choices=now), gr.update(choices=now))
        return (*shown_view, now, *choices)

    def tick(code: Any, key: Any, highlight_name: Any, table_page: Any, known: list[str]) -> tuple:
        """The counts and the table; the chart is the page's script's (CHART_LOOP)."""
        return refresh(code, key, highlight_name, table_page, known, chart=False)

    remembered = gr.BrowserState(None, storage_key=REMEMBERED_KEY, secret=REMEMBERED_SECRET)

    def come_back(kept: Any, typed: Any) -> tuple:
        """The class view this browser kept open, shown again (a reload on the projector), unless a code is typed."""
        resumed = None if typed else handlers.resume(kept)
        if resumed is None:
            return gr.skip(), gr.skip(), *(gr.skip(),) * 3, (None if kept is not None and not typed else gr.skip())
        return (*resumed, *shown(True), gr.skip())

    # Asked when a tab is picked, after a round trip: a BrowserState reads its storage once its tab is drawn, and
    # the Room tab is not drawn until it is first picked.
    ctx.tabs.select(lambda: None, None, None, **quiet).then(
        come_back, [remembered, code_box], [code_box, key_box, view, ticks, maps_ticks, remembered], **quiet
    ).then(None, credentials, None, js=CHART_LOOP)
    opened = open_btn.click(handlers.open_room, [room_name, server_key, link_box], [code_box, key_box, link_box],
                            api_name="open_room", js=f"(name, key, page) => [name, key, {PAGE_ADDRESS}]", **cheap)
    opened.success(lambda: gr.update(visible=True), None, link_box, **quiet)
    for started in (opened, show_btn.click(refresh, view_inputs, view_outputs, api_visibility="private", **cheap)):
        started.success(lambda code, key: (*shown(True), "", [code, key]), credentials,
                        [view, ticks, maps_ticks, room_note, remembered], **quiet)
        started.success(None, credentials, None, js=CHART_LOOP)
    refreshed = ticks.tick(tick, view_inputs, view_outputs, **quiet)
    refreshed.failure(lambda: (*shown(False), "The room has ended (closed, or idle too long).", None), None,
                      [view, ticks, maps_ticks, room_note, remembered], **quiet)
    gr.on([highlight.change, page.submit], refresh, view_inputs, view_outputs, **quiet)
    gr.api(handlers.class_view, api_name="class_view", **cheap)
    table.select(_row_name, None, highlight, **quiet)
    maps_inputs = [*credentials, layer, head, maps_page]
    gr.on([maps_ticks.tick, layer.release, head.release, maps_page.submit, show_btn.click], handlers.class_maps,
          maps_inputs, maps, api_name="class_maps", **{**quiet, "api_visibility": "public"})
    lesson_fields = list(ctx.lesson.fields.values()) if ctx.lesson is not None else []
    push_btn.click(handlers.push_lesson, [*credentials, hide, lock, *lesson_fields], push_note, api_name="push_lesson",
                   **cheap)
    export_btn.click(handlers.export_room, credentials, files, api_name="export_room", **cheap)
    compare_btn.click(handlers.room_to_compare, [*credentials, compared], compare_note, api_name="room_to_compare",
                      **cheap)
    close_btn.click(handlers.close_room, credentials, room_note, api_name="close_room", **cheap).success(
        lambda: (*shown(False), None), None, [view, ticks, maps_ticks, remembered], **quiet)
    ctx.routes.append(chart_route(handlers))
    return handlers


def chart_route(handlers: RoomHandlers) -> APIRoute:
    """The route the teacher's page redraws the class chart from (CHART_LOOP): POST {"code", "key", "highlight"},
    answered {"plot": the chart's Plotly JSON}; 403 with the words a wrong key gets over the API, 400 for a body
    that is no such JSON, 413 for one longer than CHART_BODY_BYTES (read no further). The chart is made in a
    worker thread, as an event's is, not on the server's event loop."""

    async def room_chart(request: Request) -> JSONResponse:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > CHART_BODY_BYTES:
                return JSONResponse({"error": f"A chart request is at most {CHART_BODY_BYTES} bytes."}, 413)
        try:
            asked = json.loads(body)
        except ValueError:  # not JSON, or not UTF-8
            asked = None
        if not isinstance(asked, dict):
            return JSONResponse({"error": "A chart request is a JSON object: code, key, highlight."}, 400)
        try:
            plot = await run_in_threadpool(handlers.class_chart, asked.get("code"), asked.get("key"),
                                           asked.get("highlight"))
        except gr.Error as error:
            return JSONResponse({"error": error.message}, 403)
        return JSONResponse({"plot": plot.plot}, headers={"Cache-Control": "no-store"})

    return APIRoute(CHART_PATH, room_chart, methods=["POST"])


def _row_name(event: gr.SelectData) -> Any:
    """The learner whose row the teacher clicked (the first column holds the name)."""
    row = getattr(event, "row_value", None)
    return row[0] if row else gr.skip()
