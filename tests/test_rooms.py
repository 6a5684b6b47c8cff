"""Teachers' rooms in-process (`playground.rooms`): codes and keys, joins and their bounds, names as untrusted input,
the idle sweep, each learner's progress as the class view reads it from real trainings, the step a copying head
formed at, and a run's title through the state store's encoding. No server (tests/test_room_api.py has one)."""

import json

import gradio as gr
import pytest

from core.attention import STRONG_PATTERN, induction_heads
from core.movie import copying_onset
from core.runs import RunLog, RunRecord, decode_runs, encode_runs
from core.tensorfile import pack, unpack
from playground.rooms import (
    CODE_ALPHABET, CODE_CHARS, ENDED, GONE_S, NAME_CHARS, ROOM_NAME_CHARS, STUCK_S, Lesson, Member, Rooms, checked_code, checked_name,
    progress_of,
)
from playground.sessions import Problem, SessionRegistry
from playground.tabs.train import TrainHandlers
from playground.tabs.train.link import preset_values
from support.app import FORM
from support.handlers import make_ctx, run_train

NO_ROOM = "No open room has this code and teacher key."


class Clock:
    """A clock the test moves (`Rooms(clock=...)`)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_rooms(max_learners=200, max_rooms=20, idle_s=3600.0, server_key="", clock=None) -> Rooms:
    return Rooms(SessionRegistry(10**9, 600), max_rooms=max_rooms, max_learners=max_learners, idle_s=idle_s,
                 server_key=server_key, **({"clock": clock} if clock else {}))


def refused(call, *args) -> str:
    with pytest.raises(gr.Error) as raised:
        call(*args)
    return raised.value.message


# ---------------------------------------------------------------- the teacher's code and key


def test_open_gives_a_code_of_the_alphabet_and_a_key_that_opens_only_its_room():
    rooms = make_rooms()
    room, key = rooms.open("Workshop A")
    other, other_key = rooms.open("Workshop B")
    assert len(room.code) == CODE_CHARS and set(room.code) <= set(CODE_ALPHABET)
    assert room.code != other.code and key != other_key and len(key) >= 20
    assert rooms.teacher(room.code, key) is room
    assert rooms.teacher(f"{room.code[:4].lower()}-{room.code[4:].lower()}", key) is room  # as typed from the link
    assert key not in repr(room)  # only its digest is kept
    for wrong in (other_key, key + "x", key[:-1], "", None, 12345, ["k"], "k" * 10_000):
        assert refused(rooms.teacher, room.code, wrong) == NO_ROOM
    unknown = next(code for code in ("ZZZZZZZZ", "YYYYYYYY", "XXXXXXXX") if code not in (room.code, other.code))
    assert refused(rooms.teacher, unknown, key) == NO_ROOM  # the same words as a wrong key: nothing to probe
    for malformed in ("", "ABC", "0" * CODE_CHARS, "IIIIIIII", "../../etc/passwd", "A" * 10_000, None, 7, ["x"]):
        assert "room code" in refused(rooms.teacher, malformed, key)
    rooms.close(room)
    assert refused(rooms.teacher, room.code, key) == NO_ROOM
    assert rooms.teacher(other.code, other_key) is other  # closing one room leaves the others


def test_a_server_teacher_key_opens_rooms_and_every_class_view():
    rooms = make_rooms(server_key="the-server-secret")
    for wrong in ("", "the-server-secre", "the-server-secret ", None, "x" * 1000):
        assert "teacher key" in refused(rooms.open, "Workshop", wrong)
    assert len(rooms) == 0
    room, key = rooms.open("Workshop", "the-server-secret")
    assert key == "the-server-secret" and rooms.teacher(room.code, key) is room
    assert refused(rooms.teacher, room.code, "another") == NO_ROOM


def test_room_names_are_checked_and_only_ever_names():
    rooms = make_rooms(max_rooms=50)
    for bad in ("", "   \n\t ", "x" * (10 * 2**20), "y" * (ROOM_NAME_CHARS + 1), None, 42, ["a"]):
        assert "room's name" in refused(rooms.open, bad)
    assert len(rooms) == 0
    assert rooms.open("  Tuesday \n\n workshop\r\n")[0].name == "Tuesday workshop"
    # control characters (a terminal's escapes, NUL) are not kept in a name shown in tables, charts and files
    named = rooms.open("Room\x00one\x1b[2J\x07 \u202eevil")[0].name
    assert all(char.isprintable() for char in named) and "Room" in named and "evil" in named
    for path in ("../../etc/passwd", "/tmp/x", "C:\\x", "~/.ssh/id_rsa"):
        assert rooms.open(path)[0].name == path  # only ever shown, never a path


def test_a_server_holds_at_most_max_rooms():
    rooms = make_rooms(max_rooms=3)
    opened = [rooms.open(f"R{i}")[0] for i in range(3)]
    assert "3 rooms already" in refused(rooms.open, "one more")
    rooms.close(opened[0])
    rooms.open("now it fits")


# ---------------------------------------------------------------- learners joining


def test_join_names_learners_keeps_members_and_moves_between_rooms():
    rooms = make_rooms()
    room, _ = rooms.open("A")
    second, _ = rooms.open("B")
    _, anonymous = rooms.join(room.code, "s1")
    assert checked_name(anonymous.name) == anonymous.name and len(anonymous.name.split()) >= 2
    _, ada = rooms.join(room.code, "s2", "Ada")
    assert ada.name == "Ada"
    _, other = rooms.join(room.code, "s3", "Ada")
    assert other.name != "Ada" and checked_name(other.name) == other.name  # a taken name gets another
    assert rooms.join(room.code, "s2", "Someone else")[1] is ada and ada.name == "Ada"  # a rejoin keeps the member
    assert "called Ada already" in refused(rooms.rename, "s3", "Ada")
    assert rooms.rename("s3", "Grace").name == "Grace"
    rooms.join(second.code, "s2")
    assert rooms.membership("s2")[0] is second and room.members["s2"].left  # joining B left A
    assert [m.key for m in room.present] == ["s1", "s3"]
    rooms.leave("s1")
    assert rooms.membership("s1") is None and [m.key for m in room.present] == ["s3"]
    assert "not in a room" in refused(rooms.rename, "s1", "Back")
    unknown = next(code for code in ("ZZZZZZZZ", "YYYYYYYY") if code not in (room.code, second.code))
    assert "No open room" in refused(rooms.join, unknown, "s9")


def test_learner_names_take_letters_of_any_script_and_no_markup():
    for good, kept in (("Zoë", "Zoë"), ("李雷", "李雷"), ("  Ada  Lovelace ", "Ada Lovelace"),
                       ("O'Brien-Smith", "O'Brien-Smith"), ("x" * NAME_CHARS, "x" * NAME_CHARS),
                       ("Ada\nLovelace", "Ada Lovelace")):  # a line break is only a space between words
        assert checked_name(good) == kept
    for bad in ("<script>alert(1)</script>", "**x**", "_x_", "[a](http://x)", "a|b", "`x`", "x" * (NAME_CHARS + 1),
                "", "   ", "a\x00b", "\u202eevil", "=cmd()", None, 5, ["Ada"], "é" * 10_000):
        with pytest.raises(gr.Error):
            checked_name(bad)


def test_a_full_room_refuses_and_10000_joins_keep_it_bounded():
    rooms = make_rooms(max_learners=200)
    room, _ = rooms.open("Big")
    messages = set()
    for i in range(10_000):
        try:
            rooms.join(room.code, f"session-{i}")
        except gr.Error as error:
            messages.add(error.message)
    assert len(room.present) == 200 and len(room.members) == 200
    assert messages == {"This room is full (200 learners)."}
    assert len({m.name for m in room.present}) == 200  # every anonymous name told apart
    # churn: learners leave and others come, many times over; who left is forgotten past a bound
    for i in range(10_000):
        if i % 2:
            rooms.leave(f"session-{i}")
        try:
            rooms.join(room.code, f"churn-{i}")
        except gr.Error:
            pass
        assert len(room.members) <= 2 * rooms.max_learners
        assert len(room.present) <= rooms.max_learners
    assert len(room.present) == 200
    assert rooms._member_of == {m.key: room.code for m in room.present}  # who left is not remembered there


def test_a_room_cap_counts_only_who_is_present():
    rooms = make_rooms(max_learners=2)
    room, _ = rooms.open("Small")
    rooms.join(room.code, "a")
    rooms.join(room.code, "b")
    assert refused(rooms.join, room.code, "c") == "This room is full (2 learners)."
    rooms.leave("a")
    rooms.join(room.code, "c")
    assert [m.key for m in room.present] == ["b", "c"]


def test_sweep_ends_idle_rooms_and_their_members_membership():
    clock = Clock()
    rooms = make_rooms(idle_s=100.0, clock=clock)
    idle, key = rooms.open("idle")
    busy, busy_key = rooms.open("busy")
    rooms.join(idle.code, "learner")
    rooms.join(busy.code, "other")
    clock.now += 60
    rooms.teacher(busy.code, busy_key)  # a call keeps a room alive
    clock.now += 50
    rooms.sweep()
    assert idle.closed and not busy.closed and len(rooms) == 1
    assert rooms.membership("learner") is None and rooms.membership("other")[0] is busy
    assert refused(rooms.teacher, idle.code, key) == NO_ROOM
    assert "No open room" in refused(rooms.join, idle.code, "newcomer")
    clock.now += 100
    rooms.sweep()
    assert len(rooms) == 0 and rooms.membership("other") is None and rooms._member_of == {}


# ---------------------------------------------------------------- progress, as the class view reads it


def training_class():
    """(the app's context, the Train tab's handlers, the rooms' clock, the rooms, an open room) for learners
    who really train."""
    ctx = make_ctx()
    clock = Clock()
    rooms = Rooms(ctx.registry, max_rooms=2, max_learners=10, idle_s=3600, clock=clock)
    room, _ = rooms.open("Class")
    return ctx, TrainHandlers(ctx), clock, rooms, room


def test_progress_follows_a_learner_through_training():
    ctx, train, clock, rooms, room = training_class()
    _, member = rooms.join(room.code, "a")
    ctx.registry.get("a")
    assert progress_of(ctx.registry.peek("a"), member).state == "joined"
    # training: read while the run streams
    states = []
    for _ in train.run.train(**{**FORM, "steps": 40}, request="a"):
        states.append(progress_of(ctx.registry.peek("a"), member).state)
    assert set(states) == {"training"}
    ((_, done),) = rooms.progress(room)
    assert done.state == "done" and done.step == done.max_steps == 40 and done.problem == ""
    assert done.loss is not None and done.val_loss is not None and done.answers is not None
    assert done.curve[0][-1] == 40 and len(done.curve[0]) == len(done.curve[1]) > 1
    assert done.val_curve[0] and done.run >= 1
    # stopped: Stop pressed mid-run
    stream = train.run.train(**{**FORM, "steps": 400}, request="a")
    next(stream)
    ctx.registry.peek("a").stop_requested = True
    for _ in stream:
        pass
    stopped = progress_of(ctx.registry.peek("a"), member)
    assert stopped.state == "stopped" and stopped.step < stopped.max_steps == 400
    # refused: a form the server will not train; the model trained before stays the class view's
    with pytest.raises(gr.Error):
        run_train(train, "a", n_layer=999)
    refusal = progress_of(ctx.registry.peek("a"), member)
    assert refusal.state == "refused" and "layer" in refusal.problem.lower() and refusal.step == stopped.step
    # an error while it trained reads as one
    ctx.registry.peek("a").train_problem = Problem(refused=False, message="diverged")
    assert progress_of(ctx.registry.peek("a"), member).state == "error"
    # refused before anything trained
    _, fresh = rooms.join(room.code, "b")
    ctx.registry.get("b")
    with pytest.raises(gr.Error):
        run_train(train, "b", preset="nope")
    first = progress_of(ctx.registry.peek("b"), fresh)
    assert first.state == "refused" and first.problem and first.step == 0
    # gone: the session freed, the last progress stays (the results); while their page may still ask for the
    # lesson (GONE_S) they stay in the room, then they are marked left
    rooms.progress(room)
    kept = member.last
    ctx.registry.free("a")
    staying = dict((m.key, p) for m, p in rooms.progress(room))["a"]
    assert staying == kept and not member.left
    clock.now += GONE_S
    gone = dict((m.key, p) for m, p in rooms.progress(room))["a"]
    assert gone.state == "left" and gone.step == kept.step and gone.curve == kept.curve and member.left


def test_a_learner_who_closes_their_tab_before_the_view_reads_them_keeps_their_results():
    ctx, train, clock, rooms, room = training_class()
    rooms.join(room.code, "a")
    run_train(train, "a")
    ctx.registry.free("a")  # no class view read "a" since they joined
    clock.now += GONE_S  # ... and their page stopped asking for the lesson
    ((member, gone),) = rooms.progress(room)
    assert gone.state == "left" and gone.step == FORM["steps"] and gone.curve[0][-1] == FORM["steps"]
    assert member.left and gone.loss is not None


def test_a_learner_without_progress_for_stuck_s_is_stuck():
    registry = SessionRegistry(10**9, 600)
    clock = Clock()
    rooms = Rooms(registry, max_rooms=2, max_learners=10, idle_s=10 * STUCK_S, clock=clock)
    room, _ = rooms.open("Class")
    rooms.join(room.code, "a")
    registry.get("a")
    (member, progress), = rooms.progress(room)
    assert progress.state == "joined" and not rooms.stuck(member, progress)
    clock.now += STUCK_S - 1
    assert not rooms.stuck(member, rooms.progress(room)[0][1])
    clock.now += 1
    assert rooms.stuck(member, rooms.progress(room)[0][1])
    registry.free("a")
    clock.now += GONE_S  # ... and their page stopped asking
    assert not rooms.stuck(*rooms.progress(room)[0])  # left: not stuck, gone


@pytest.fixture(scope="module")
def repeat_run():
    """A session trained on the default task (the "repeat" preset) for 120 steps: its answers all right by the end."""
    ctx = make_ctx()
    train = TrainHandlers(ctx)
    values = {**preset_values(train.rules, "repeat"), "steps": 120}
    run_train(train, "a", **values)
    return ctx.registry.peek("a")


def test_the_head_formed_at_is_filled_once_the_answers_are_right_and_is_where_copying_stays_formed(repeat_run):
    trained = repeat_run.trained
    frames = trained.movie.frames
    onset = copying_onset(trained.movie)
    right = [row["step"] for row in trained.history if row.get("answer_accuracy") == 1.0]
    assert right and right[-1] == trained.step == 120  # the default task is learned
    assert onset is not None  # filled once the answers are right

    def copies(frame):
        return frame.copying >= STRONG_PATTERN or bool(induction_heads(frame.probe))

    first = next(i for i, frame in enumerate(frames) if frame.step == onset)
    assert all(copies(frame) for frame in frames[first:]) and (first == 0 or not copies(frames[first - 1]))
    assert not copies(frames[0])  # an untrained model does not copy: the onset is a real moment
    member = Member("a", "Ada", joined=0.0)
    assert progress_of(repeat_run, member).formed_at == onset


# ---------------------------------------------------------------- a learner's run in the teacher's Compare runs


def test_a_run_title_survives_the_state_store_and_older_runs_decode(repeat_run):
    trained = repeat_run.trained
    log = RunLog()
    record = RunRecord.of(log.new_number(), trained.model.config, "repeat", trained.history,
                          trained.train_config.to_dict(), ["a", "b"], None, title="Zoë 李雷")
    log.keep(record)
    decoded = decode_runs(encode_runs(log))
    assert [r.title for r in decoded.records] == ["Zoë 李雷"]
    assert decoded.records[0].train_curve == record.train_curve
    # a log kept before titles were: the same bytes without "title"
    tensors, metadata = unpack(encode_runs(log), 10**9)
    runs = json.loads(metadata["runs"])
    for run in runs:
        del run["title"]
    older = decode_runs(pack(tensors, {**metadata, "runs": json.dumps(runs)}))
    assert [r.title for r in older.records] == [""] and older.records[0].step == record.step
    runs[0]["title"] = 5
    with pytest.raises(ValueError):
        decode_runs(pack(tensors, {**metadata, "runs": json.dumps(runs)}))


def test_checked_code_takes_the_link_s_form_only():
    assert checked_code(" 7kq2-m9xd ") == "7KQ2M9XD"
    for bad in ("7KQ2-M9X", "7KQ2-M9XDD", "7KQ2_M9XD", "OOOOOOOO", "7KQ2\x00M9XD", "７KQ2M9XD", "-" * 100):
        with pytest.raises(gr.Error):
            checked_code(bad)


def test_a_page_still_open_keeps_its_place_when_a_flood_drops_its_session():
    """A learner who joined (a light session: no model yet) and whose session a flood of new sessions pushed out
    keeps their place while their page asks for the lesson; one whose page stopped asking makes room."""
    clock = Clock()
    registry = SessionRegistry(10**9, 600, max_light_sessions=3)
    rooms = Rooms(registry, max_rooms=2, max_learners=2, idle_s=3600, clock=clock)
    room, _ = rooms.open("Class")
    tickets = {}
    for key in ("open-page", "closed-page"):
        registry.get(key)
        tickets[key] = rooms.join(room.code, key)[1].ticket
    for i in range(10):  # the flood: every light session of ours is dropped
        registry.get(f"flood-{i}")
    assert registry.peek("open-page") is None and registry.peek("closed-page") is None
    assert refused(rooms.join, room.code, "flood-9") == "This room is full (2 learners)."
    clock.now += GONE_S - 1
    assert rooms.asked(tickets["open-page"]) == 0  # its page asks for the lesson (none yet)
    clock.now += 1
    rooms.join(room.code, "flood-9")  # the closed page made room; the open one did not
    assert [m.key for m in room.present] == ["open-page", "flood-9"]
    assert [p.state for _, p in rooms.progress(room)] == ["joined", "left", "joined"]


def test_a_page_asks_with_its_ticket_and_finds_the_lesson_until_it_leaves_or_the_room_ends():
    rooms = make_rooms()
    room, key = rooms.open("Class")
    other, _ = rooms.open("Other")
    _, ada = rooms.join(room.code, "ada")
    _, bo = rooms.join(room.code, "bo")
    assert len(ada.ticket) >= 20 and ada.ticket != bo.ticket and ada.ticket != ada.key
    assert rooms.asked(ada.ticket) == 0  # no lesson yet
    rooms.push(room, Lesson({"steps": 100}, said="Steps **100**."))
    rooms.push(room, Lesson({"steps": 100}, said="Steps **100**."))
    assert rooms.asked(ada.ticket) == rooms.asked(bo.ticket) == 2
    assert rooms.join(room.code, "ada")[1].ticket == ada.ticket  # joining again keeps the place
    for forged in (None, "", 7, ["x"], "x" * 10_000, ada.key, ada.ticket[:-1], room.code, key):
        assert rooms.asked(forged) == ENDED, forged
    rooms.join(other.code, "ada")  # into another room: the old ticket names no place
    assert rooms.asked(ada.ticket) == ENDED
    assert rooms.asked(rooms.membership("ada")[1].ticket) == 0  # ... the new one the other room's (no lesson)
    rooms.leave("ada")
    assert rooms.asked(rooms.membership("bo")[1].ticket) == 2
    rooms.close(room)
    assert rooms.asked(bo.ticket) == ENDED
