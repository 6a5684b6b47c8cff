"""A learner in a teacher's room, on the Train tab: joining through the room's link (`?room=CODE`), the banner with
the room's name and the learner's own (changeable), leaving, and the lessons the teacher pushes, which set the
form as a teacher's link does (`link.FormSetter`), a training going on as it was.

    http://host:7860/?room=7KQ2-M9XD      # joins the room as "Swift Otter" (a name of their own later)

A joined page asks every ROOM_POLL_S whether a new lesson came (one call with one output; nothing when none did),
so a push reaches every learner within about ten seconds without a connection held open per learner. The Train tab also
gives the Room tab the form as a lesson (`lesson_form`: `AppContext.lesson`), checked by the form's own rules.

Public events: /join_room (code, name), /room_name, /leave_room (and the UI-only poll and the join on load).
Reads the rooms (`playground.rooms`) and the link (`link`). Never imports the layout or another part's handlers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import validate
from playground.context import AppContext, LessonForm
from playground.rooms import Lesson, Member, Room
from playground.sessions import session_key
from playground.tabs.train import link
from playground.tabs.train.form import FormRules

# How often a joined page asks for a new lesson: a push reaches everyone within about this. Each ask is a Gradio
# event of ~40 ms of the server's one Python thread on this 2-core host: 150 pages asking every 2 s saturated it
# (tests/bench/README.md, issue 39), every 10 s they take about a sixth of it.
ROOM_POLL_S = 10.0
ENDED = -1  # what the poll finds once the room has ended or the learner left
NOT_IN_A_ROOM = "You are not in a room."


class LearnerRoom:
    """The learner's handlers: join, rename, leave, and the poll that applies the teacher's lessons."""

    def __init__(self, ctx: AppContext, setter: link.FormSetter, *, row: gr.Column, banner: gr.Markdown,
                 name_box: gr.Textbox, poll: gr.Timer, seen: gr.State) -> None:
        self.ctx, self.rooms, self.setter = ctx, ctx.rooms, setter
        self.row, self.banner, self.name_box, self.poll, self.seen = row, banner, name_box, poll, seen
        self.outputs = [row, banner, name_box, poll, seen, *setter.outputs]

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

    def poll_lesson(self, seen: Any, request: gr.Request) -> Any:
        """The version of the room's lesson when it is newer than the one this page applied (`seen`), ENDED once
        the room has ended or the learner left, else nothing: one output, so that an idle poll (nearly all of
        them) costs the server a lookup, not the ~40 components the lesson sets (`take_lesson` sets those)."""
        joined = self.rooms.membership(session_key(request))
        if joined is None:
            return ENDED
        room, _member = joined
        seen = seen if isinstance(seen, int) and not isinstance(seen, bool) else 0
        return room.lesson.version if room.lesson is not None and room.lesson.version > seen else gr.skip()

    def take_lesson(self, pending: Any, view: Any, request: gr.Request) -> dict:
        """The form set by the room's newest lesson, which the poll found (`pending`); once the room has ended or
        the learner left, the banner hidden and the poll stopped."""
        joined = None if pending == ENDED else self.rooms.membership(session_key(request))
        if joined is None:
            return {self.poll: gr.Timer(active=False), self.row: gr.update(visible=False)}
        room, member = joined
        return self._lesson(room, member, 0, view) or {self.banner: gr.skip()}

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
        return {self.row: gr.update(visible=False), self.poll: gr.Timer(active=False)}

    def _joined(self, room: Room, member: Member) -> dict:
        return {self.row: gr.update(visible=True), self.banner: _banner(room, member),
                self.name_box: gr.update(value=member.name, visible=True), self.poll: gr.Timer(active=True)}

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
    """The room's banner on the Train tab (hidden until the page joins a room), its poll, and the lesson it applied."""

    row: gr.Column
    text: gr.Markdown
    name_box: gr.Textbox
    rename: gr.Button
    leave: gr.Button
    poll: gr.Timer
    seen: gr.State  # the version of the lesson the page applied
    pending: gr.State  # ... and of the one the poll found


def banner() -> Banner:
    """Lay out the banner where it is called (the top of the Train tab: a push's news is seen first)."""
    with gr.Column(visible=False, elem_id="room-banner", variant="panel") as row:
        text = gr.Markdown(elem_id="room-note")
        with gr.Row(equal_height=False):
            name_box = gr.Textbox(label="Your name in the room", max_length=64, scale=2, min_width=160,
                                  elem_id="room-name")
            rename = gr.Button("Rename", size="sm", scale=1, min_width=80, elem_id="room-rename")
            leave = gr.Button("Leave the room", size="sm", scale=1, min_width=110, elem_id="room-leave")
    return Banner(row, text, name_box, rename, leave, gr.Timer(ROOM_POLL_S, active=False), gr.State(0), gr.State(0))


def wire(ctx: AppContext, shown: Banner, setter: link.FormSetter, rules: FormRules, after: Any) -> LearnerRoom:
    """The room's events, and `ctx.lesson`; `after` is the page-load event the join follows (the link's, then
    the model coming back), so that the lesson has the last word on the form."""
    learner = LearnerRoom(ctx, setter, row=shown.row, banner=shown.text, name_box=shown.name_box, poll=shown.poll,
                          seen=shown.seen)
    quiet = dict(**ctx.cheap(), api_visibility="private", show_progress="hidden")
    after.then(learner.join_from_link, setter.view, learner.outputs, **quiet)
    shown.poll.tick(learner.poll_lesson, shown.seen, shown.pending, **quiet)
    shown.pending.change(learner.take_lesson, [shown.pending, setter.view], learner.outputs, **quiet)
    shown.rename.click(learner.rename, shown.name_box, shown.text, api_name="room_name", **ctx.cheap())
    shown.leave.click(learner.leave, None, [shown.row, shown.poll], api_name="leave_room", **ctx.cheap())
    gr.api(learner.join_room, api_name="join_room", **ctx.cheap())
    ctx.lesson = lesson_form(rules, setter.form)
    return learner
