"""Coming back after a restart (issue 24), against real server processes over raw HTTP: two servers on
one store; train on one, kill it with SIGKILL mid-run, come back on the other with the same browser
token and find the weights of the last evaluation byte for byte; going on from there trains exactly as
the same checkpoint uploaded into a fresh session does; the killed server, started again on the same
store, gives the continued model back. Tokens a browser did not get from the server restore nothing,
and an idle model makes room through the store."""

import contextlib
import hashlib
import io
import json
import logging
import secrets
import threading
import time
import zipfile
from pathlib import Path

import gradio as gr
import httpx
import pytest
from support.app import FORM, GENERATE, form, serve, tiny_model_bytes, wait_until
from support.hostile import Hostile, Server

from playground.settings import Settings
from playground.tabs.train.restore import DAMAGED, UNREADABLE

pytestmark = pytest.mark.integration
EVAL_EVERY = 25


def archives(store: Path) -> list[Path]:
    return sorted(store.glob("*.zip"))


def weights_of(archive: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return zf.read("model.safetensors")


def downloaded(app: Hostile, session: str) -> bytes:
    """The session's model as the Download button gives it."""
    file = app.ok("save_checkpoint", [], session)[0]
    return httpx.get(file["url"], timeout=30).content


def history_of(archive: bytes) -> list[dict]:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return json.loads(zf.read("config.json"))["meta"]["history"]


def comes_back(app: Hostile, token: str, tab: str, step: int) -> str:
    """The session of a new tab with `token` that got the model at `step` (the store's writer works in
    the background: the last state may take a moment; each try is a new tab)."""
    deadline = time.monotonic() + 15
    for attempt in range(1000):
        answer = str(app.ok("come_back", [token, None], f"{tab}-{attempt}"))
        if f"step {step}" in answer:
            return f"{tab}-{attempt}"
        assert time.monotonic() < deadline, answer[:300]
        time.sleep(0.1)


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "store"


def test_a_killed_server_gives_each_browser_its_model_back_on_any_server_of_its_store(store):
    first, other = Server(store, wait=False), Server(store, wait=False)  # two processes on one store
    try:
        first.wait()
        other.wait()
        token = first.app.ok("come_back", [None, None], "tab-before")[0]  # a new browser gets its token
        assert isinstance(token, str) and len(token) == 44
        run = form(steps=4000, eval_interval=EVAL_EVERY)

        def train() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server dies under it
                first.app.call("train", run, "tab-before", timeout=300)
        threading.Thread(target=train, daemon=True).start()
        deadline = time.monotonic() + 120
        while not archives(store):
            assert time.monotonic() < deadline, "nothing was written to the store"
            time.sleep(0.1)
        time.sleep(1.0)  # mid-run, a few evaluations later
    finally:
        first.kill()  # no goodbye: whatever is not in the store now is lost
    kept = archives(store)[0].read_bytes()
    step = history_of(kept)[-1]["step"]
    assert step > 0 and step % EVAL_EVERY == 0, step  # an evaluation's state, not a half-written one

    restarted = None
    try:
        # The learner's next page lands on the other server (a replica): the model is there.
        app = other.app
        answer = app.ok("come_back", [token, None], "tab-after")
        assert any(isinstance(v, str) and "Welcome back" in v and f"step {step}" in v for v in answer), answer
        assert weights_of(downloaded(app, "tab-after")) == weights_of(kept)  # byte for byte

        # Going on: the restored session, and the same checkpoint uploaded into a fresh session.
        more = form(steps=step + 30, eval_interval=EVAL_EVERY)
        app.ok("train", more, "tab-after")
        app.ok("load_checkpoint", [app.upload("kept.zip", kept)], "fresh-upload")
        app.ok("train", more, "fresh-upload")
        continued, reference = (history_of(downloaded(app, s)) for s in ("tab-after", "fresh-upload"))
        assert continued[-1]["step"] == step + 30
        assert continued == reference

        # The killed server started again on the same store: the session, continued on the other, comes back.
        restarted = Server(store)
        tab = comes_back(restarted.app, token, "after-restart", step + 30)
        # ... with its run kept to compare: one run (continuing a model goes on with its run), to its last step
        runs = restarted.app.ok("compare_runs", [], tab)[0]["runs"]
        assert [(r["run"], r["step"]) for r in runs] == [(1, step + 30)]
        assert runs[0]["val_curve"]["steps"][-1] == step + 30 and runs[0]["attention"] is not None
        # ... and its attention movie: what it recorded before the kill and on the other server, to the last step
        movie, before = restarted.app.ok("attention_movie", [], tab)[0], app.ok("attention_movie", [], "tab-after")[0]
        assert movie["steps"][-1] == step + 30 and movie["steps"][0] < step and movie["recorded"] > 2
        assert movie == before
    finally:
        other.kill()
        if restarted is not None:
            restarted.kill()


def test_an_idle_model_makes_room_through_the_store_and_comes_back_on_its_owners_next_click(tmp_path):
    room = 1.5 * tiny_model_bytes()  # memory for one FORM model: a second learner needs the first's room
    settings = Settings.from_env({}, model_memory_bytes=int(room), set_aside_idle_s=0.2,
                                 state_dir=str(tmp_path / "store"))
    with serve(settings) as (demo, url):
        app = Hostile(url)
        for learner in ("first", "second"):
            app.ok("come_back", [None, None], learner)  # a browser: it has a token, so its model can be kept
        app.ok("train", form(), "first")
        time.sleep(0.3)
        app.ok("train", form(), "second")  # nobody refused: the first's idle model went to the store
        assert "first" not in demo.registry and demo.registry.counts()["models"] == 1
        time.sleep(0.3)  # (the second's model, just trained, is not set aside at once)
        tokens, text, status = app.ok("generate", GENERATE, "first")  # its next click: the model is back
        assert text.startswith("\n" + GENERATE[0]) and "tokens" in status  # (a task model's prompt starts a line)
        back = demo.registry.peek("first").trained
        assert back.step == FORM["steps"]
        assert back.movie is not None and back.movie.frames[-1].step == FORM["steps"]  # its movie came back too
        assert "second" not in demo.registry  # idle now, it made room in turn


def test_tokens_not_made_here_restore_nothing_and_touch_nothing(running_app):
    demo, url = running_app
    store, app = Path(demo.store.root), Hostile(url)
    real = app.ok("come_back", [None, None], "owner")[0]
    app.ok("train", form(eval_interval=10), "owner")  # a model kept under `real`
    assert demo.store.writer.flush()
    before = {p.name: p.stat().st_mtime for p in store.iterdir()}
    for forged in ["../../../etc/passwd", "x" * (1 << 20), real[:-1] + ("A" if real[-1] != "A" else "B"),
                   {"token": real}, 12345, real + "/"]:
        answer = app.call("come_back", [forged, None], "thief")
        if answer["success"]:
            values = answer["output"]["data"]
            assert real not in str(values)[:200] and "Welcome back" not in str(values), str(values)[:200]
    assert demo.registry.peek("thief").trained is None
    unknown = app.ok("come_back", [demo.store.tokens.new(), None], "stranger")  # signed, but never saved: a fresh start
    assert "Welcome back" not in str(unknown)
    assert {p.name: p.stat().st_mtime for p in store.iterdir()} == before
    assert UNREADABLE in str(app.ok("come_back", ["../../../etc/passwd", None], "someone"))


def test_a_token_planted_in_a_browser_is_not_adopted(running_app):
    """Someone plants a well-formed value in a shared PC's storage, hoping to read the next learner's model
    with it later: the server gives that browser a token of its own, and the planted value reads nothing."""
    demo, url = running_app
    app = Hostile(url)
    planted = secrets.token_urlsafe(33)[:44]  # the form of a token, but not signed by this store's key
    answer = app.ok("come_back", [planted, None], "learner")
    token = answer[0]
    assert token != planted and demo.store.tokens.verified(token) == token and UNREADABLE in str(answer)
    app.ok("train", form(eval_interval=10), "learner")  # the learner's model is kept under the server's token
    assert demo.store.writer.flush()
    later = app.ok("come_back", [planted, None], "thief")
    assert "Welcome back" not in str(later) and demo.registry.peek("thief").trained is None
    assert "Welcome back" in str(app.ok("come_back", [token, None], "learner-again"))


def test_a_kept_movie_that_fails_its_checks_is_dropped_and_the_model_comes_back(tmp_path):
    with serve(Settings.from_env({}, state_dir=str(tmp_path / "store"))) as (demo, url):
        app = Hostile(url)
        token = app.ok("come_back", [None, None], "before")[0]
        app.ok("train", form(), "before")
        assert demo.store.writer.flush()
        [archive] = archives(tmp_path / "store")
        with zipfile.ZipFile(archive) as zf:
            files = {name: zf.read(name) for name in zf.namelist()}
        assert "movie.safetensors" in files
        files["movie.safetensors"] = files["movie.safetensors"][:-1000]  # damaged (truncated) on the disk
        with zipfile.ZipFile(archive, "w") as zf:
            for name, data in files.items():
                zf.writestr(name, data)
        answer = app.ok("come_back", [token, None], "after")
        assert any(isinstance(v, str) and f"at step {FORM['steps']}" in v for v in answer), answer
        assert demo.registry.peek("after").trained.movie is None
        assert "no attention movie yet" in app.error("attention_movie", [], "after")


def test_a_code_carries_a_model_to_a_server_at_another_address(store):
    """Browser storage is per address: the same store behind another port strands the model, unless the
    learner carries it with a code. The code works once; a typo, a forged code or one for a tab without
    a model is told in words; both browsers then hold the same token (the last to save wins)."""
    first, other = Server(store, wait=False), Server(store, wait=False)
    try:
        first.wait()
        other.wait()
        assert first.port != other.port
        token = first.app.ok("come_back", [None, None], "laptop")[0]
        assert "train one" in first.app.error("carry_code", [], "laptop")  # no model yet
        first.app.ok("train", form(), "laptop")
        code = first.app.ok("carry_code", [], "laptop")[0]
        assert isinstance(code, str) and len(code) == 19 and token not in code

        fresh = other.app.ok("come_back", [None, None], "second-laptop")[0]  # another address: another token
        assert fresh != token and "Welcome back" not in str(fresh)
        typo = code[:-1] + ("2" if code[-1] != "2" else "3")
        for wrong in (typo, "../../etc/passwd", "x" * 64):
            assert "does not open a model here" in other.app.error("take_code", [wrong], "second-laptop")
        assert "Paste the code" in other.app.error("take_code", [""], "second-laptop")
        taken = other.app.ok("take_code", [code.lower()], "second-laptop")
        assert taken[0] == token  # this browser keeps the model's token from now on
        assert any(isinstance(v, str) and f"from the other browser is here, at step {FORM['steps']}" in v
                   for v in taken), taken
        assert weights_of(downloaded(other.app, "second-laptop")) == weights_of(downloaded(first.app, "laptop"))
        assert "does not open a model here" in other.app.error("take_code", [code], "third")  # once
        assert "Welcome back" in str(other.app.ok("come_back", [token, None], "second-laptop-reloaded"))
    finally:
        first.kill()
        other.kill()


DAMAGES = {"flipped bytes": lambda data: data[:len(data) // 2] + bytes(b ^ 0xFF for b in data[len(data) // 2:][:64])
           + data[len(data) // 2 + 64:],
           "truncated archive": lambda data: data[: 2 * len(data) // 3]}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_entry_is_said_in_the_learners_words_put_aside_and_the_page_loads(damage, tmp_path, caplog):
    store = tmp_path / "store"
    with serve(Settings.from_env({}, state_dir=str(store))) as (demo, url), \
            caplog.at_level(logging.WARNING, logger="playground"):
        app = Hostile(url)
        token = app.ok("come_back", [None, None], "before")[0]
        app.ok("train", form(), "before")
        assert demo.store.writer.flush()
        [archive] = archives(store)
        archive.write_bytes(DAMAGES[damage](archive.read_bytes()))  # damaged on the disk
        answer = app.ok("come_back", [token, None], "after")  # the page-load event succeeds
        assert DAMAGED in answer and not any(word in str(answer) for word in ("restored.zip", "safetensors")), answer
        assert demo.registry.peek("after").trained is None
        assert archives(store) == [] and [p.name for p in store.glob("*.damaged")] == [archive.stem + ".damaged"]
        assert "could not be read and is put aside" in caplog.text  # the details, for the operator
        assert httpx.get(url, timeout=30).status_code == 200
        assert DAMAGED not in str(app.ok("come_back", [token, None], "later"))  # said once: then a fresh start
        app.ok("train", form(), "later")  # and the same browser's next model is kept again
        assert demo.store.writer.flush() and len(archives(store)) == 1


def test_a_server_process_starts_and_serves_on_a_store_whose_secret_is_damaged(tmp_path):
    """A whole server on the worst case, the empty secret a full disk's first start left (test_store races
    eight stores on empty, garbage and short secrets and keys, on a folder and on memory://)."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "browser-secret").write_bytes(b"")
    log = tmp_path / "server.log"
    server = Server(store, log=log)
    try:
        assert "Attention Playground" in httpx.get(server.url, timeout=30).text
        token = server.app.ok("come_back", [None, None], "tab")[0]
        assert isinstance(token, str) and len(token) == 44
        # a browser whose token the replaced secret made unreadable sends none, but says it had one: a note
        assert UNREADABLE in str(server.app.ok("come_back", [None, True], "tab-of-before"))
        assert UNREADABLE not in str(server.app.ok("come_back", [None, None], "new-tab"))
        assert (store / "browser-secret.1").read_text() in httpx.get(f"{server.url}config", timeout=30).text
        assert log.read_text().count("browser-secret is damaged") == 1
    finally:
        server.kill()


@pytest.mark.parametrize("state", ["off", "unwritable"])
def test_with_no_store_a_reload_of_the_tab_finds_its_model_again_in_memory(state, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # a store that cannot even be made: memory only, and the page says so
    settings = Settings.from_env({}, state_dir="off" if state == "off" else str(blocker / "store"))
    with serve(settings) as (demo, url):
        assert demo.store is None
        app = Hostile(url)
        first = app.ok("come_back", [None, None], "tab")
        token = first[0]
        assert isinstance(token, str) and len(token) == 44  # a token all the same: the reload is known by it
        said = "A reload of this tab finds it again within 10 minutes" in str(first)
        assert said == (state == "unwritable")  # (the operator's choice is not a problem to report)
        app.ok("train", form(), "tab")
        assert app.close_page("tab") == 200  # the reload closes the tab ...
        wait_until(lambda: demo.registry.peek("tab") is not None and demo.registry.peek("tab").closed)
        forged = token[:-1] + ("A" if token[-1] != "A" else "B")  # a value planted in another browser
        assert "Welcome back" not in str(app.ok("come_back", [forged, None], "thief"))
        assert demo.registry.peek("tab").closed and demo.registry.peek("thief").trained is None
        answer = app.ok("come_back", [token, None], "reloaded")  # ... and its new page has the model back
        assert f"Welcome back: your model is here as you left it, at step {FORM['steps']}" in str(answer), answer
        assert "tab" not in demo.registry and demo.registry.peek("reloaded").trained.step == FORM["steps"]
        text = app.ok("generate", GENERATE, "reloaded")[1]
        assert text.startswith("\n" + GENERATE[0])
        assert "Welcome back" not in str(app.ok("come_back", [token, None], "second-tab"))  # handed over once


def test_a_set_aside_model_damaged_in_the_store_is_said_once_and_put_aside(tmp_path):
    room = 1.5 * tiny_model_bytes()  # memory for one FORM model: a second learner needs the first's room
    store = tmp_path / "store"
    settings = Settings.from_env({}, model_memory_bytes=int(room), set_aside_idle_s=0.2, state_dir=str(store))
    with serve(settings) as (demo, url):
        app = Hostile(url)
        token = [app.ok("come_back", [None, None], learner)[0] for learner in ("first", "second")][0]
        app.ok("train", form(), "first")
        time.sleep(0.3)
        app.ok("train", form(), "second")  # the first's idle model went to the store
        assert "first" not in demo.registry
        archive = store / (hashlib.sha256(token.encode()).hexdigest() + ".zip")
        archive.write_bytes(DAMAGES["truncated archive"](archive.read_bytes()))
        message = app.error("generate", GENERATE, "first")  # its next click: it cannot come back, said plainly
        assert "could not be brought back from the server's storage" in message and "safetensors" not in message
        assert [p.name for p in store.glob("*.damaged")] == [archive.stem + ".damaged"]
        assert "There is no model yet" in str(app.ok("generate", GENERATE, "first"))  # then a fresh start


def train_handlers(store: Path):
    """The Train tab's handlers of a server on `store` (a second call: a restart), the handlers' small caps."""
    from support.handlers import SETTINGS

    from playground.context import AppContext
    from playground.sessions import SessionRegistry
    from playground.store import StateStore
    from playground.tabs.train import TrainHandlers

    return TrainHandlers(AppContext(settings=SETTINGS, registry=SessionRegistry(10**9, 600), model_changed=None,
                                    tabs=None, store=StateStore(str(store), 10**9)))


def test_the_live_sample_comes_back_with_the_model(tmp_path):
    """A reload or a restart brought the model and its curve back, and an empty live sample: the last sample
    the page showed is kept with the model."""
    before = train_handlers(tmp_path / "store")
    token = before.restore.come_back(None, None, "tab-before")["token"]
    shown = list(before.run.train(**FORM, request="tab-before"))[-1][3]
    assert shown and before.ctx.store.writer.flush()
    assert train_handlers(tmp_path / "store").restore.come_back(token, None, "tab-after")["sample"] == shown


@pytest.mark.parametrize("token_comes", ["during the run", "after the run"])
def test_a_model_trained_before_the_page_had_its_token_is_kept_with_its_form(token_comes, tmp_path, monkeypatch):
    """On a busy server Train can be pressed before the page's load event has given the browser its token. The
    model is kept all the same, with the form it trained with: a restart (or a code) brings both back, not the
    model alone under the default form, nor nothing."""
    before, steps = train_handlers(tmp_path / "store"), 4 * FORM["eval_interval"]
    run = before.run.train(**{**FORM, "steps": steps}, request="tab")
    if token_comes == "during the run":
        next(run)
        token = before.restore.come_back(None, None, "tab")["token"]
        assert before.ctx.registry.peek("tab").busy  # the run keeps it, at its evaluations and its end
    list(run)
    if token_comes == "after the run":
        token = before.restore.come_back(None, None, "tab")["token"]
    assert before.ctx.store.writer.flush()
    back = train_handlers(tmp_path / "store").restore.come_back(token, None, "tab-after")
    assert f"at step {steps}" in back["status"] and back["steps"] == steps
    written = []
    monkeypatch.setattr(before.ctx.store.writer, "submit", lambda *kept: written.append(kept))
    before.restore.come_back(token, None, "tab")  # a client sending it again does not make the store write again
    assert written == []


@pytest.mark.parametrize("phone_browser", ["new", "with a model of its own"])
def test_a_code_taken_before_the_page_had_its_token_is_what_the_next_visit_finds(phone_browser, tmp_path):
    """On a busy server a code can be taken before the page's load event has reached it. That event then gives the
    browser the taken model's token, not a fresh one or the browser's old one: the next visit finds the taken model."""
    laptop = train_handlers(tmp_path / "store")
    laptop.restore.come_back(None, None, "laptop")
    list(laptop.run.train(**{**FORM, "steps": 30}, request="laptop"))
    code = laptop.restore.carry_code("laptop")
    phone = train_handlers(tmp_path / "store")  # another address of the same store
    kept = None
    if phone_browser != "new":  # the phone's browser has a model of its own, kept from an earlier visit
        kept = phone.restore.come_back(None, None, "phone-before")["token"]
        list(phone.run.train(**FORM, request="phone-before"))
        assert phone.ctx.store.writer.flush()
    taken = phone.restore.take_code(code, "phone")
    loaded = phone.restore.come_back(kept, None, "phone")  # the page's load event, late
    assert loaded["token"] == taken["token"] and loaded["status"] == gr.skip()
    assert phone.ctx.registry.peek("phone").trained.step == 30  # the taken model stays on the page
    back = train_handlers(tmp_path / "store").restore.come_back(loaded["token"], None, "phone-next-visit")
    assert "at step 30" in back["status"] and back["steps"] == 30

