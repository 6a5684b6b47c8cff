"""A hostile client against a teacher's room on a real running app, over raw HTTP (`support.hostile.Hostile`):
teacher calls without the key, with a forged one or another room's, room names of 10 MB or shaped like paths,
a flood of joins from new session hashes, forged session hashes, lessons with bad fields, and a learner reading
what is not theirs. Each gets a clear message and leaves the room as it was; the server goes on answering."""

import dataclasses
import json
import threading
from pathlib import Path

import pytest

import httpx

from playground.rooms import ENDED, Lesson
from playground.settings import Settings
from playground.tabs.room import VIEW_PATH
from playground.tabs.train.link import LINKED
from playground.tabs.train.room import LESSON_PATH
from support.app import FORM, REPO, form, serve
from support.hostile import Hostile

pytestmark = pytest.mark.integration

NO_ROOM = "No open room has this code and teacher key."
PAGE = "http://127.0.0.1:7860/"
MAX_LEARNERS = 20
JOINS, THREADS = 120, 12  # the flood: six times the cap, from this many concurrent clients (each call costs
# Gradio tenths of a second of this loaded test machine's CPU: the in-process 10,000 are in test_rooms.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(demo, Hostile, its state store's folder): the app with rooms of at most MAX_LEARNERS learners."""
    state = tmp_path_factory.mktemp("room-state")
    settings = dataclasses.replace(Settings.from_env({}), room_max_learners=MAX_LEARNERS, state_dir=str(state))
    with serve(settings) as (demo, url):
        yield demo, Hostile(url), state


def lesson(**changes) -> list:
    """The Train form's linked fields (what /push_lesson takes after hide and lock), FORM with `changes`."""
    return [{**FORM, **changes}[name] for name in LINKED]


def open_room(app: Hostile, name: str, teacher: str) -> tuple[str, str]:
    code, key, link = app.ok("open_room", [name, "", PAGE], teacher)
    assert link == f"{PAGE}?room={code[:4]}-{code[4:]}"
    return code, key


# every teacher event, with the arguments after (code, key) that would pass with the right key
TEACHER_CALLS = {"class_view": [None, 1], "class_maps": [0, 0, 1], "push_lesson": [[], [], *lesson()],
                 "export_room": [], "room_to_compare": [["Ada"]], "close_room": []}


def test_teacher_calls_without_the_right_key_are_refused_and_touch_nothing(server):
    demo, app, _ = server
    code, key = open_room(app, "Workshop", "teacher")
    other_code, other_key = open_room(app, "Another workshop", "other-teacher")
    app.ok("join_room", [code, "Ada"], "ada")
    app.ok("push_lesson", [code, key, ["model"], [], *lesson(steps=30)], "teacher")
    room = demo.rooms._rooms[code]
    pushed = room.lesson
    assert isinstance(pushed, Lesson) and pushed.version == 1 and pushed.values["steps"] == 30
    forged = key[:-1] + ("A" if key[-1] != "A" else "B")
    for api_name, rest in TEACHER_CALLS.items():
        for wrong_key, who in (("", "teacher"), (None, "teacher"), (forged, "teacher"), (other_key, "other-teacher"),
                               (forged, "ada"), ("", "ada"), ("k" * 100_000, "teacher")):
            assert app.error(api_name, [code, wrong_key, *rest], who) == NO_ROOM, (api_name, wrong_key)
        # another room's code with this room's key: the same words
        assert app.error(api_name, [other_code, key, *rest], "teacher") == NO_ROOM
    assert not room.closed and demo.rooms._rooms[code] is room and room.lesson is pushed
    assert [m.name for m in room.present] == ["Ada"]
    assert app.error("class_view", ["../../etc/passwd", key, None, 1], "teacher").startswith("A room code is")
    ((counts, _chart, table, names),) = app.ok("class_view", [code, key, None, 1], "teacher")  # the key still opens it
    assert names == ["Ada"] and [row[0] for row in table["data"]] == ["Ada"]
    assert "**1** joined" in counts
    app.ok("close_room", [other_code, other_key], "other-teacher")


def test_a_learner_reads_only_their_own_place_in_the_room(server):
    demo, app, _ = server
    code, key = open_room(app, "Lab", "teacher-2")
    app.ok("join_room", [code, "Grace"], "grace")
    (banner,) = app.ok("join_room", [code, ""], "linus")
    me = demo.rooms._rooms[code].members["linus"].name
    assert "Lab" in banner and me in banner and "Grace" not in banner
    (again,) = app.ok("room_name", ["Linus"], "linus")
    assert "Linus" in again and "Grace" not in again
    # with their own session and no key, the class view and the rest are closed to them
    for api_name, rest in TEACHER_CALLS.items():
        assert app.error(api_name, [code, "", *rest], "linus") == NO_ROOM
    assert "called Grace already" in app.error("room_name", ["Grace"], "linus")
    app.ok("close_room", [code, key], "teacher-2")


def test_a_page_asks_for_the_lesson_with_its_ticket_and_forged_tickets_find_nothing(server):
    demo, app, _ = server
    code, key = open_room(app, "Asking", "teacher-3")
    app.ok("join_room", [code, ""], "asker")
    ticket = demo.rooms._rooms[code].members["asker"].ticket
    ask = f"{app.url}{LESSON_PATH.lstrip('/')}"

    def asked(**params) -> int:
        answer = httpx.get(ask, params=params, timeout=30)
        assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
        return answer.json()["lesson"]

    assert asked(ticket=ticket) == 0
    app.ok("push_lesson", [code, key, [], [], *lesson(steps=40)], "teacher-3")
    assert asked(ticket=ticket) == 1
    for forged in ("", "x", ticket[:-1], code, key, "asker", "../../etc/passwd", "t" * 60_000):
        assert asked(ticket=forged) == ENDED, forged[:40]
    assert asked() == ENDED  # no ticket
    assert httpx.post(ask, data={"ticket": ticket}, timeout=30).status_code == 405
    assert asked(ticket=ticket) == 1 and demo.rooms._rooms[code].lesson.version == 1
    app.ok("leave_room", [], "asker")
    assert asked(ticket=ticket) == ENDED
    app.ok("close_room", [code, key], "teacher-3")


def test_the_view_route_draws_only_with_the_key_and_refuses_bad_bodies(server):
    demo, app, _ = server
    code, key = open_room(app, "Charting <b>", "teacher-4")
    other_code, other_key = open_room(app, "Another chart", "teacher-5")
    chart = f"{app.url}{VIEW_PATH.lstrip('/')}"

    def post(**kwargs) -> httpx.Response:
        return httpx.post(chart, timeout=30, **kwargs)

    drawn = post(json={"code": code, "key": key, "highlight": None})
    assert drawn.status_code == 200 and drawn.headers["cache-control"] == "no-store"
    view = drawn.json()
    assert "No learner has trained yet" in json.loads(view["plot"])["layout"]["annotations"][0]["text"]
    assert view["counts"]["title"].startswith("Room Charting <b>")  # the page writes it as text, not HTML
    assert view["table"]["data"] == [] and view["names"] == [] and "maps" not in view
    with_maps = post(json={"code": code, "key": key, "page": 1, "maps": {"layer": 0, "head": 0, "page": 1}}).json()
    assert "No learner on this page yet" in json.loads(with_maps["maps"])["layout"]["annotations"][0]["text"]
    for bad_maps in ({"layer": 10_000, "head": 0}, {"layer": "../x"}, [0, 0], "maps"):
        refused = post(json={"code": code, "key": key, "maps": bad_maps})
        assert refused.status_code == 400, bad_maps
    for bad_page in (0, -1, 1e300, "x", [1]):
        assert post(json={"code": code, "key": key, "page": bad_page}).status_code == 400, bad_page
    forged = key[:-1] + ("A" if key[-1] != "A" else "B")
    for wrong in ({"code": code, "key": forged}, {"code": code}, {"code": code, "key": other_key},
                  {"code": other_code, "key": key}, {"code": code, "key": ["k"]}):
        refused = post(json=wrong)
        assert refused.status_code == 403 and refused.json()["error"] == NO_ROOM, wrong
    for bad_code in ("../../etc/passwd", None, 7):
        assert post(json={"code": bad_code, "key": key}).json()["error"].startswith("A room code is")
    for body in (b"", b"not json", b"[1, 2]", b'"code"', b"\xff\xfe", b"{"):
        bad = post(content=body, headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and "JSON object" in bad.json()["error"], body
    big = post(content=b'{"code": "' + b"A" * 10_000_000 + b'"}', headers={"Content-Type": "application/json"})
    assert big.status_code == 413 and "at most" in big.json()["error"]
    assert httpx.get(chart, timeout=30).status_code == 405
    assert post(json={"code": code, "key": key}).status_code == 200  # the server goes on, the room as it was
    assert not demo.rooms._rooms[code].closed
    for room_code, room_key, teacher in ((code, key, "teacher-4"), (other_code, other_key, "teacher-5")):
        app.ok("close_room", [room_code, room_key], teacher)
    assert post(json={"code": code, "key": key}).status_code == 403  # closed: the page's script stops


PATH_NAMES = ("../../etc/passwd", "/tmp/x", "C:\\x", "..\\..\\boot.ini")


def test_room_names_of_10_mb_or_shaped_like_paths_stay_names(server):
    demo, app, state = server
    places = [REPO, Path.cwd(), Path("/tmp"), state]
    before = {place: set(place.rglob("*") if place == state else place.iterdir()) for place in places}
    huge = app.call("open_room", ["x" * (10 * 2**20), "", PAGE], "teacher-3")
    assert not huge["success"]
    assert "status" in huge or "room's name" in huge["output"]["error"]
    rooms_before = len(demo.rooms)
    for name in PATH_NAMES:
        code, key = open_room(app, name, "teacher-3")
        assert demo.rooms._rooms[code].name == name
        (banner,) = app.ok("join_room", [code, "Ada"], f"learner-of-{len(name)}")
        assert "**Room " in banner
        files = app.ok("export_room", [code, key], "teacher-3")[0]
        assert sorted(Path(f["path"]).name for f in files) == ["class-chart.png", "room.csv", "room.json"]
        app.ok("class_view", [code, key, None, 1], "teacher-3")
        app.ok("close_room", [code, key], "teacher-3")
    assert len(demo.rooms) == rooms_before
    leaves = {name.replace("\\", "/").rsplit("/", 1)[-1] for name in PATH_NAMES} | set(PATH_NAMES)
    for place in places:
        after = set(place.rglob("*") if place == state else place.iterdir())
        assert not {path.name for path in after - before[place]} & leaves, place
    assert not Path("/tmp/x").exists() or Path("/tmp/x") in before[Path("/tmp")]


def test_a_flood_of_joins_fills_the_room_to_its_cap_and_the_server_goes_on(server):
    demo, app, _ = server
    code, key = open_room(app, "Flood", "teacher-4")
    answers: list[dict] = []
    lock = threading.Lock()

    def joins(start: int) -> None:
        for i in range(start, JOINS, THREADS):
            answer = app.call("join_room", [code, ""], f"flood-{i:04d}")
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=joins, args=(start,)) for start in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    room = demo.rooms._rooms[code]
    assert len(answers) == JOINS and sum(answer["success"] for answer in answers) == MAX_LEARNERS
    assert len(room.present) == len(room.members) == MAX_LEARNERS
    assert {answer["output"]["error"] for answer in answers if not answer["success"]} == {
        f"This room is full ({MAX_LEARNERS} learners)."}
    ((counts, _chart, table, _names),) = app.ok("class_view", [code, key, None, 1], "teacher-4")
    assert len(table["data"]) == MAX_LEARNERS  # one page: 25 rows a page
    assert f"**{MAX_LEARNERS}** joined" in counts
    # a learner in the room still trains
    learner = room.present[0].key
    app.ok("train", form(steps=5), learner)
    assert demo.registry.peek(learner).trained.step == 5
    app.ok("close_room", [code, key], "teacher-4")


def test_forged_and_oversized_session_hashes_on_join_room(server):
    demo, app, _ = server
    code, key = open_room(app, "Hashes", "teacher-5")
    for session_hash in ("x" * 20_000, "a" * 1_000):  # (a URL of 64 KiB is more than httpx sends)
        answer = app.call("join_room", [code, ""], session_hash)
        assert not answer["success"]
        assert "status" in answer or "session hash" in answer["output"]["error"]
    for session_hash in ("../../etc/passwd", "C:\\x", "<script>", "\u202e"):
        app.ok("join_room", [code, ""], session_hash)  # any hash is only a dictionary key
    room = demo.rooms._rooms[code]
    assert sorted(room.members) == sorted(("../../etc/passwd", "C:\\x", "<script>", "\u202e"))
    for bad in (None, 5, ["x"], {"a": 1}, "x" * 10_000, "<b>ZZZZ</b>"):
        assert "room code" in app.error("join_room", [bad, ""], "someone")
    for bad in ("<script>", "x" * 1000, "**x**", 5):
        assert app.error("join_room", [code, bad], "someone-else").startswith("A name")
    assert "someone" not in room.members and "someone-else" not in room.members
    app.ok("close_room", [code, key], "teacher-5")


def test_a_lesson_with_bad_fields_is_refused_naming_the_field(server):
    demo, app, _ = server
    code, key = open_room(app, "Lessons", "teacher-6")
    app.ok("push_lesson", [code, key, [], [], *lesson()], "teacher-6")
    room = demo.rooms._rooms[code]
    pushed = room.lesson
    for hide, lock, changes, named in (([], [], {"n_layer": 999}, "layer"), ([], [], {"preset": "nope"}, "preset"),
                                       (["../x"], [], {}, "group"), ([], ["../x"], {}, "group"),
                                       ("model", [], {}, "Hide"), ([], [], {"steps": -5}, "steps"),
                                       ([], [], {"learning_rate": "NaN"}, "learning rate"),
                                       ([["model"]], [], {}, "Hide")):
        message = app.error("push_lesson", [code, key, hide, lock, *lesson(**changes)], "teacher-6")
        assert named.lower() in message.lower(), (changes, hide, lock, message)
    assert room.lesson is pushed and room.lesson.version == 1
