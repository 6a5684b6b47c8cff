"""A learner in a teacher's room, on the Train tab: joining through the room's link (`?room=CODE`), the banner with
the room's name and the learner's own (changeable), leaving, and the lessons the teacher pushes, which set the
form as a teacher's link does (`link.FormSetter`), a training going on as it was.

    http://host:7860/?room=7KQ2-M9XD      # joins the room as "Swift Otter" (a name of their own later)

A joined page asks every ROOM_ASK_S whether a new lesson came, with its member's ticket, over a plain route of
the app (`lesson_route`: GET /room_lesson?ticket=..., answered with the lesson's version in microseconds), not a
Gradio event (~40 ms of the server's one Python thread each: 150 pages asking every 2 s saturated it). Only when
the version changed does the page's script press the hidden "take" button, and that event sets the form. So a push
reaches every learner within about ROOM_ASK_S without a connection held open per learner. The Train tab also gives
the Room tab the form as a lesson (`lesson_form`: `AppContext.lesson`), checked by the form's own rules.

Public events: /join_room (code, name), /room_name, /leave_room (and the UI-only join on load and take).
Reads the rooms (`playground.rooms`) and the link (`link`). Never imports the layout or another part's handlers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import gradio as gr
from fastapi import Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from playground import validate
from playground.context import AppContext, LessonForm
from playground.rooms import ENDED, Lesson, Member, Room, Rooms
from playground.sessions import session_key
from playground.tabs.train import link
from playground.tabs.train.form import FormRules

ROOM_ASK_S = 2.0  # how often a joined page asks for a new lesson: a push reaches everyone within about this
LESSON_PATH = "/room_lesson"
NOT_IN_A_ROOM = "You are not in a room."
# The page's side of the asking, started (and stopped, by an empty value) when the hidden follow box changes: it
# holds {"ticket", "lesson": the version the page has, "every": seconds}. A failed ask (a server restarting)
# is asked again later; ENDED stops it, after one last take that hides the banner.
FOLLOW = f"""(follow) => {{
    clearTimeout(window.roomAsk);
    if (!follow) return;
    const {{ticket, lesson, every}} = JSON.parse(follow);
    const root = ((window.gradio_config && window.gradio_config.root) || ".").replace(/\\/$/, "");
    let known = lesson;
    const ask = async () => {{
        try {{
            const answer = await (await fetch(`${{root}}{LESSON_PATH}?ticket=${{encodeURIComponent(ticket)}}`,
                                              {{cache: "no-store"}})).json();
            if (answer.lesson !== known) {{
                known = answer.lesson;
                document.querySelector("#room-take").click();
            }}
            if (known === {ENDED}) return;
        }} catch (error) {{}}
        window.roomAsk = setTimeout(ask, every * 1000);
    }};
    window.roomAsk = setTimeout(ask, every * 1000);
}}"""


class LearnerRoom:
    """The learner's handlers: join, rename, leave, and taking the teacher's lessons."""

    def __init__(self, ctx: AppContext, setter: link.FormSetter, *, row: gr.Column, banner: gr.Markdown,
                 name_box: gr.Textbox, follow: gr.Textbox, seen: gr.State) -> None:
        self.ctx, self.rooms, self.setter = ctx, ctx.rooms, setter
        self.row, self.banner, self.name_box, self.follow, self.seen = row, banner, name_box, follow, seen
        self.outputs = [row, banner, name_box, follow, seen, *setter.outputs]

    def join_from_link(self, view: link.View, request: gr.Request) -> dict:
        """On load: join the room the page's link names (`?room=`), and take its lesson; nothing without one."""
        code = request.query_params.get("room")
        if code is None:
            return {self.banner: gr.skip()}
        try:
            room, member = self.rooms.join(code, self.ctx.registry.get(request).key)
        except gr.Error as error:  # said on the page, where the learner looks, not as a passing toast
            return {self.row: gr.update(visible=True), self.banner: f"⚠️ {error.message}",
                    self.name_box: gr.update(visible=False)}
        return {**self._joined(room, member), **self._lesson(room, member, 0, view)}

    def join_room(self, code: Any, name: Any, request: gr.Request) -> str:
        """Join the room with this code (as a room's link does), named `name` (empty: a new anonymous name).

        Returns:
            the banner: the room's name and yours.
        """
        room, member = self.rooms.join(code, self.ctx.registry.get(request).key, name)
        return _banner(room, member)

    def take_lesson(self, seen: Any, view: Any, request: gr.Request) -> dict:
        """The form set by the room's lesson if it is newer than the one this page applied (`seen`), when the
        page's asking found a new one; once the room has ended or the learner left, the banner hidden."""
        joined = self.rooms.membership(session_key(request))
        if joined is None:
            return {self.follow: "", self.row: gr.update(visible=False)}
        room, member = joined
        seen = seen if isinstance(seen, int) and not isinstance(seen, bool) else 0
        return self._lesson(room, member, seen, view) or {self.banner: gr.skip()}

    def rename(self, name: Any, request: gr.Request) -> str:
        """Your name in your room (letters, digits, spaces and . ' -; at most 24 characters).

        Returns:
            the banner: the room's name and yours.
        """
        member = self.rooms.rename(session_key(request), name)
        joined = self.rooms.membership(session_key(request))
        return _banner(joined[0], member) if joined else NOT_IN_A_ROOM

    def leave(self, request: gr.Request) -> dict:
        """Leave your room (your model stays yours); the page stops following its lessons."""
        self.rooms.leave(session_key(request))
        return {self.row: gr.update(visible=False), self.follow: ""}

    def _joined(self, room: Room, member: Member) -> dict:
        version = room.lesson.version if room.lesson is not None else 0
        follow = json.dumps({"ticket": member.ticket, "lesson": version, "every": ROOM_ASK_S})
        return {self.row: gr.update(visible=True), self.banner: _banner(room, member),
                self.name_box: gr.update(value=member.name, visible=True), self.follow: follow}

    def _lesson(self, room: Room, member: Member, seen: int, view: Any) -> dict:
        """The form set by the room's lesson (none yet: only the banner), if newer than `seen`."""
        lesson = room.lesson
        if lesson is None or lesson.version <= seen:
            return {}
        setup = link.Setup(lesson.values, (), link.View(lesson.hide, lesson.lock), ())
        before = view if isinstance(view, link.View) else link.View()
        # the banner says what the lesson set: no note of "this page's link" beside it
        return {**self.setter.updates(setup, before, note_text=""), self.seen: lesson.version,
                self.banner: _banner(room, member, pushed=True)}


def _banner(room: Room, member: Member, pushed: bool = False) -> str:
    """The room's name and the learner's, and the lesson: news when it was just `pushed`."""
    lesson = room.lesson
    said = "" if lesson is None else (
        f"\n\n**{'Your teacher set the lesson' if pushed else 'The lesson'}**: {lesson.said}")
    return (f"**Room {validate.as_markdown(room.name)}**: you are **{member.name}**. Your teacher sees your loss "
            f"curve and attention maps, never your text.{said}")


def _titles(groups) -> str:
    return ", ".join(f"**{group.title()}**" for group in groups)


def lesson_form(rules: FormRules, form: dict[str, gr.Component]) -> LessonForm:
    """The Train form as a room's lesson (`AppContext.lesson`): the fields a link sets, checked by the form's rules."""
    labels = {name: form[name].label or name for name in link.LINKED}

    def check(values: dict[str, Any], hide: tuple[str, ...], lock: tuple[str, ...], before: Lesson | None) -> str:
        for group in (*hide, *lock):
            validate.choice(group, "A group to hide or lock", link.GROUPS)
        link.check(rules, values)
        earlier = before.values if before is not None else link.preset_values(rules, values["preset"])
        changes = [f"{labels[name]} **{link.as_text(values[name])}**" for name in link.LINKED
                   if name != "preset" and link.as_text(values[name]) != link.as_text(earlier.get(name))]
        said = [f"preset **{validate.as_markdown(str(values['preset']))}**"] + changes
        view = {"locks": lock, "hides": hide}
        before_view = {"locks": before.lock, "hides": before.hide} if before else {}
        undo = {"locks": "unlocks", "hides": "shows again"}
        for verb, groups in view.items():
            if groups:
                said.append(f"{verb} {_titles(groups)}")
            freed = [group for group in before_view.get(verb, ()) if group not in groups]
            if freed:
                said.append(f"{undo[verb]} {_titles(freed)}")
        return "; ".join(said) + "."

    return LessonForm(fields={name: form[name] for name in link.LINKED}, groups=tuple(link.GROUPS), check=check)


@dataclass
class Banner:
    """The room's banner on the Train tab (hidden until the page joins a room), what its asking needs, and the
    lesson it applied."""

    row: gr.Column
    text: gr.Markdown
    name_box: gr.Textbox
    rename: gr.Button
    leave: gr.Button
    follow: gr.Textbox  # hidden: what the page's script asks with (FOLLOW); empty: it asks no more
    take: gr.Button  # hidden: pressed by that script when the lesson's version changed
    seen: gr.State  # the version of the lesson the page applied


def banner() -> Banner:
    """Lay out the banner where it is called (the top of the Train tab: a push's news is seen first)."""
    with gr.Column(visible=False, elem_id="room-banner", variant="panel") as row:
        text = gr.Markdown(elem_id="room-note")
        with gr.Row(equal_height=False):
            name_box = gr.Textbox(label="Your name in the room", max_length=64, scale=2, min_width=160,
                                  elem_id="room-name")
            rename = gr.Button("Rename", size="sm", scale=1, min_width=80, elem_id="room-rename")
            leave = gr.Button("Leave the room", size="sm", scale=1, min_width=110, elem_id="room-leave")
        follow = gr.Textbox(visible="hidden", elem_id="room-follow")
        take = gr.Button(visible="hidden", elem_id="room-take")
    return Banner(row, text, name_box, rename, leave, follow, take, gr.State(0))


def wire(ctx: AppContext, shown: Banner, setter: link.FormSetter, rules: FormRules, after: Any) -> LearnerRoom:
    """The room's events, and `ctx.lesson`; `after` is the page-load event the join follows (the link's, then
    the model coming back), so that the lesson has the last word on the form."""
    learner = LearnerRoom(ctx, setter, row=shown.row, banner=shown.text, name_box=shown.name_box,
                          follow=shown.follow, seen=shown.seen)
    quiet = dict(**ctx.cheap(), api_visibility="private", show_progress="hidden")
    after.then(learner.join_from_link, setter.view, learner.outputs, **quiet)
    shown.follow.change(None, shown.follow, None, js=FOLLOW)
    shown.take.click(learner.take_lesson, [shown.seen, setter.view], learner.outputs, **quiet)
    shown.rename.click(learner.rename, shown.name_box, shown.text, api_name="room_name", **ctx.cheap())
    shown.leave.click(learner.leave, None, [shown.row, shown.follow], api_name="leave_room", **ctx.cheap())
    gr.api(learner.join_room, api_name="join_room", **ctx.cheap())
    ctx.lesson = lesson_form(rules, setter.form)
    ctx.routes.append(lesson_route(ctx.rooms))
    return learner


def lesson_route(rooms: Rooms) -> APIRoute:
    """The route a joined page asks with its ticket (FOLLOW): {"lesson": the version of its room's lesson, 0 when
    none, ENDED once the room ended or the learner left}. Run on the server's event loop, no thread, no Gradio
    event: a dictionary lookup. A ticket is random and only looked up, never stored from a request."""

    async def room_lesson(request: Request) -> JSONResponse:
        return JSONResponse({"lesson": rooms.asked(request.query_params.get("ticket"))},
                            headers={"Cache-Control": "no-store"})

    return APIRoute(LESSON_PATH, room_lesson, methods=["GET"])
