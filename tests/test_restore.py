"""Coming back after a restart (issue 24), against real server processes over raw HTTP: two servers on
one store; train on one, kill it with SIGKILL mid-run, come back on the other with the same browser
token and find the weights of the last evaluation byte for byte; going on from there trains exactly as
the same checkpoint uploaded into a fresh session does; the killed server, started again on the same
store, gives the continued model back. Tokens a browser did not get from the server restore nothing,
and an idle model makes room through the store."""

import contextlib
import io
import json
import threading
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from conftest import serve
from test_hostile import GENERATE, TINY, Hostile, Server, form, tiny_model_bytes

from playground.settings import Settings
from playground.store import new_token
from playground.tabs.train.restore import UNREADABLE

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
        answer = str(app.ok("come_back", [token], f"{tab}-{attempt}"))
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
        token = first.app.ok("come_back", [None], "tab-before")[0]  # a new browser gets its token
        assert isinstance(token, str) and len(token) == 43
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
        answer = app.ok("come_back", [token], "tab-after")
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
    room = 1.5 * tiny_model_bytes()  # memory for one TINY model: a second learner needs the first's room
    settings = Settings.from_env({}, model_memory_bytes=int(room), set_aside_idle_s=0.2,
                                 state_dir=str(tmp_path / "store"))
    with serve(settings) as (demo, url):
        app = Hostile(url)
        for learner in ("first", "second"):
            app.ok("come_back", [None], learner)  # a browser: it has a token, so its model can be kept
        app.ok("train", form(), "first")
        time.sleep(0.3)
        app.ok("train", form(), "second")  # nobody refused: the first's idle model went to the store
        assert "first" not in demo.registry and demo.registry.counts()["models"] == 1
        time.sleep(0.3)  # (the second's model, just trained, is not set aside at once)
        tokens, text, status = app.ok("generate", GENERATE, "first")  # its next click: the model is back
        assert text.startswith("\n" + GENERATE[0]) and "tokens" in status  # (a task model's prompt starts a line)
        back = demo.registry.peek("first").trained
        assert back.step == TINY["steps"]
        assert back.movie is not None and back.movie.frames[-1].step == TINY["steps"]  # its movie came back too
        assert "second" not in demo.registry  # idle now, it made room in turn


def test_tokens_not_made_here_restore_nothing_and_touch_nothing(running_app):
    demo, url = running_app
    store, app = Path(demo.store.root), Hostile(url)
    real = app.ok("come_back", [None], "owner")[0]
    app.ok("train", form(eval_interval=10), "owner")  # a model kept under `real`
    assert demo.store.writer.flush()
    before = {p.name: p.stat().st_mtime for p in store.iterdir()}
    for forged in ["../../../etc/passwd", "x" * (1 << 20), real[:-1] + ("A" if real[-1] != "A" else "B"),
                   {"token": real}, 12345, real + "/"]:
        answer = app.call("come_back", [forged], "thief")
        if answer["success"]:
            values = answer["output"]["data"]
            assert real not in str(values)[:200] and "Welcome back" not in str(values), str(values)[:200]
    assert demo.registry.peek("thief").trained is None
    unknown = app.ok("come_back", [new_token()], "stranger")  # well-formed, but never saved: a fresh start
    assert "Welcome back" not in str(unknown)
    assert {p.name: p.stat().st_mtime for p in store.iterdir()} == before
    assert UNREADABLE in str(app.ok("come_back", ["../../../etc/passwd"], "someone"))


def test_a_kept_movie_that_fails_its_checks_is_dropped_and_the_model_comes_back(tmp_path):
    with serve(Settings.from_env({}, state_dir=str(tmp_path / "store"))) as (demo, url):
        app = Hostile(url)
        token = app.ok("come_back", [None], "before")[0]
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
        answer = app.ok("come_back", [token], "after")
        assert any(isinstance(v, str) and f"at step {TINY['steps']}" in v for v in answer), answer
        assert demo.registry.peek("after").trained.movie is None
        assert "no attention movie yet" in app.error("attention_movie", [], "after")


def test_the_live_sample_comes_back_with_the_model(tmp_path):
    """A reload or a restart brought the model and its curve back, and an empty live sample: the last sample
    the page showed is kept with the model."""
    from test_app_handlers import FORM, SETTINGS

    from playground.context import AppContext
    from playground.sessions import SessionRegistry
    from playground.store import StateStore
    from playground.tabs.train import TrainHandlers

    def handlers() -> TrainHandlers:  # a server on the store (a second one: a restart)
        return TrainHandlers(AppContext(settings=SETTINGS, registry=SessionRegistry(10**9, 600), model_changed=None,
                                        tabs=None, store=StateStore(str(tmp_path / "store"), 10**9)))

    before = handlers()
    token = before.come_back(None, "tab-before")["token"]
    shown = list(before.train(**FORM, request="tab-before"))[-1][3]
    assert shown and before.ctx.store.writer.flush()
    assert handlers().come_back(token, "tab-after")["sample"] == shown
