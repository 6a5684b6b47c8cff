"""The session registry, the settings and the shared input validator, as plain objects."""

import math
import threading
import time

import gradio as gr
import pytest

from playground import validate
from playground.sessions import SessionRegistry, TrainedModel
from playground.settings import Settings


MODEL = 1 << 20  # the bytes a test's model claims


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTrainer:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


# ---------------------------------------------------------------- registry


def test_sessions_are_created_once_and_kept_apart():
    registry = SessionRegistry(memory_budget=4 * MODEL, ttl_s=60)
    a, b = registry.get("a"), registry.get("b")
    assert registry.get("a") is a and a is not b
    a.trained = TrainedModel("model-a", "tokenizer-a", "a corpus")
    assert a.model == "model-a" and b.model is None and b.trained is None
    assert len(registry) == 2 and "a" in registry


def test_each_session_has_its_own_random_stream():
    registry = SessionRegistry(memory_budget=4 * MODEL, ttl_s=60)
    a, b = registry.get("a"), registry.get("b")
    assert a.generator.initial_seed() != b.generator.initial_seed()


def with_trainer(trainer) -> TrainedModel:
    return TrainedModel("model", "tokenizer", "a corpus", trainer=trainer)


def model_session(registry, key, nbytes: int = None):
    """A session that trains: it claims a model's memory (MODEL bytes unless said)."""
    session = registry.get(key)
    registry.claim_model(session, MODEL if nbytes is None else nbytes)
    return session


def test_a_flood_of_sessions_without_models_evicts_no_model():
    registry = SessionRegistry(memory_budget=2 * MODEL, ttl_s=60, max_light_sessions=5)
    model_session(registry, "learner").trained = TrainedModel("trained", "tokenizer", "a corpus")
    for i in range(100):  # e.g. /baby_gpt_walk with a new session hash each time
        registry.get(f"flood-{i}")
    assert registry.get("learner").model == "trained"
    assert registry.counts() == {"sessions": 6, "models": 1, "model_bytes": MODEL}  # the light ones are capped at 5
    registry.get("flood-0")  # a dropped light session starts afresh, with no "expired" message


def test_a_model_evicts_only_a_model_idle_for_a_while_and_its_owner_is_told_once():
    clock = Clock()
    registry = SessionRegistry(memory_budget=2 * MODEL, ttl_s=3600, evict_idle_s=300, clock=clock)
    trainer = FakeTrainer()
    model_session(registry, "a").trained = with_trainer(trainer)
    model_session(registry, "b")
    with pytest.raises(gr.Error, match="server is full.*Try again in 5 minutes"):  # the real wait: a's 300 s idle
        model_session(registry, "c")
    assert "a" in registry and "b" in registry
    clock.now += 200
    with pytest.raises(gr.Error, match="Try again in 100 seconds"):
        model_session(registry, "c")
    clock.now += 200
    registry.get("b")  # b is in use; a has been idle for 400 s
    model_session(registry, "c")
    assert "a" not in registry and "b" in registry and trainer.stopped
    with pytest.raises(gr.Error, match="expired.*memory for models was full"):
        registry.get("a")
    assert registry.get("a").model is None  # told once; the next call starts afresh


def test_a_model_the_store_keeps_makes_room_at_once_and_comes_back_on_its_owners_next_call():
    clock = Clock()
    registry = SessionRegistry(memory_budget=2 * MODEL, ttl_s=3600, evict_idle_s=600, set_aside_idle_s=30,
                               clock=clock)
    store, refused = {}, set()

    def offload(session) -> bool:  # as the Train tab's: the store takes a model with a token
        if session.key in refused:
            return False
        store[session.token] = session.trained
        return True

    def bring_back(session) -> bool:
        registry.claim_model(session, MODEL)
        session.trained = store.pop(session.token)
        return True

    registry.keep_aside(offload, bring_back)
    for key in ("a", "b"):
        session = model_session(registry, key)
        session.token, session.trained = f"token-{key}", TrainedModel(f"model-{key}", "tokenizer", "a corpus")
    with pytest.raises(gr.Error, match="server is full.*Try again in 30 seconds"):  # neither idle: set aside after 30 s
        model_session(registry, "c")
    clock.now += 40  # idle long enough to be set aside, far from the 600 s an eviction waits
    registry.get("b")
    model_session(registry, "c").token = "token-c"
    assert "a" not in registry and set(store) == {"token-a"} and store["token-a"].model == "model-a"
    clock.now += 40
    back = registry.get("a")  # its owner's next call: the model is back, b (idle longest) made room
    assert back.model == "model-a" and back.token == "token-a" and "b" not in registry and "token-b" in store
    assert registry.counts()["model_bytes"] <= 2 * MODEL

    later = Clock()
    full = SessionRegistry(memory_budget=MODEL, ttl_s=3600, set_aside_idle_s=30, clock=later)  # no room to come back to
    full.keep_aside(offload, lambda session: full.claim_model(session, MODEL) or True)
    model_session(full, "x").token = "token-x"
    later.now += 40
    model_session(full, "y")  # x is set aside; y, just used and without a token, stays
    with pytest.raises(gr.Error, match="server is full"):
        full.get("x")
    later.now += 700  # y idle long enough to be evicted: x's next call brings it back
    assert full.get("x").holds_model and "y" not in full

    refused.add("c")  # a store that cannot take c: c stays, and the newcomer waits for an eviction
    clock.now += 40
    registry.get("a")
    with pytest.raises(gr.Error, match="server is full"):
        model_session(registry, "d")
    assert "c" in registry


def test_busy_sessions_are_never_evicted():
    clock = Clock()
    registry = SessionRegistry(memory_budget=1 * MODEL, ttl_s=60, evict_idle_s=0, clock=clock)
    with registry.job("a", "training") as session:
        registry.claim_model(session, MODEL)
        clock.now += 1000
        with pytest.raises(gr.Error, match="server is full.*training: room frees as a run ends"):
            model_session(registry, "b")
        assert registry.sweep() == 0
    model_session(registry, "b")
    assert "a" not in registry


def test_idle_sessions_are_swept_sooner_without_a_browser():
    clock = Clock()
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=3600, api_ttl_s=600, clock=clock)
    freed = []
    registry.on_free(freed.append)
    trainer = FakeTrainer()
    model_session(registry, "api").trained = with_trainer(trainer)
    model_session(registry, "tab")
    registry.mark_browser("tab")
    registry.get("visitor")  # holds nothing
    clock.now += 700
    assert registry.sweep() == 2
    assert "api" not in registry and "visitor" not in registry and "tab" in registry
    assert trainer.stopped and sorted(s.key for s in freed) == ["api", "visitor"]
    with pytest.raises(gr.Error, match="idle for more than 10 minutes"):
        registry.get("api")
    clock.now += 3000  # the browser's model goes after the long TTL
    assert registry.sweep() == 1 and "tab" not in registry


def test_get_sweeps_by_itself_now_and_then():
    clock = Clock()
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=10, api_ttl_s=10, clock=clock)
    registry.get("old")
    clock.now += 100
    registry.get("new")
    assert "old" not in registry


def test_free_drops_the_session_and_stops_its_training():
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=60)
    freed = []
    registry.on_free(freed.append)
    trainer = FakeTrainer()
    model_session(registry, "a").trained = with_trainer(trainer)
    registry.free("a")
    registry.free("never-seen")  # no error
    assert "a" not in registry and trainer.stopped and [s.key for s in freed] == ["a"]
    registry.get("a")  # a closed tab's id is not "expired": nobody is there to tell


def test_with_no_store_a_closed_tabs_model_waits_for_its_reload_and_goes_first_when_room_is_needed():
    clock = Clock()
    registry = SessionRegistry(memory_budget=2 * MODEL, ttl_s=3600, api_ttl_s=600, evict_idle_s=600, clock=clock)
    freed, store = [], {"works": False}
    registry.on_free(freed.append)
    registry.keep_closed(lambda session: not store["works"])  # as Train's: only where no store keeps the model
    trainer = FakeTrainer()
    tab = model_session(registry, "a-tab")
    tab.token, tab.trained = "token-a", with_trainer(trainer)
    registry.mark_browser("a-tab")
    registry.free("a-tab")  # the tab closes (a reload): it stays, closed, its training stopped
    assert "a-tab" in registry and registry.peek("a-tab").closed and trainer.stopped and freed == []
    stranger = registry.get("stranger")
    stranger.token = "token-b"  # another browser's token takes nothing
    assert registry.reopen(stranger) is None and "a-tab" in registry
    reloaded = registry.get("a-reloaded")
    reloaded.token = "token-a"
    closed = registry.reopen(reloaded)  # the same browser: the closed session, out, its claim now the reload's
    assert closed is tab and "a-tab" not in registry and [s.key for s in freed] == ["a-tab"]
    assert reloaded.holds_model and registry.counts() == {"sessions": 2, "models": 1, "model_bytes": MODEL}
    assert registry.reopen(registry.get("again")) is None  # handed over once

    reloaded.trained = closed.trained
    registry.free("a-reloaded")  # closed again, then another learner needs the room: it goes first, untold
    model_session(registry, "c")
    clock.now += 1  # nobody idle for the 600 s an eviction waits, but the closed tab's model goes
    model_session(registry, "d")
    assert "a-reloaded" not in registry and "c" in registry and "d" in registry
    registry.get("a-reloaded")  # its key brings no "expired" message: no page of it is left to tell

    registry.get("c").token = "token-c"
    registry.mark_browser("d")
    registry.free("c")
    clock.now += 601  # closed tabs go after the API time-to-live, like any session without a page
    registry.sweep()
    assert "c" not in registry and "d" in registry
    store["works"] = True  # a store keeps the model: a closed tab is freed at once, as before
    registry.get("d").token = "token-d"
    registry.free("d")
    assert "d" not in registry


@pytest.mark.parametrize("key", ["/etc", "../../tmp/x", "a\x00b", "é/../..", "C:\\Windows"])
def test_files_are_named_by_a_server_id_never_by_the_client_key(key):
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=60)
    session = registry.get(key)
    assert session.key == key and session.id.isalnum() and len(session.id) == 32
    assert registry.get(key).id == session.id and registry.get("other").id != session.id


def test_overlong_session_keys_are_refused():
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=60)
    with pytest.raises(gr.Error, match="session hash is 10,000 characters"):
        registry.get("x" * 10_000)
    assert len(registry) == 0


def test_one_job_per_session():
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=60)
    with registry.job("a", "training") as session:
        assert session.busy and session.job_name == "training"
        with pytest.raises(gr.Error, match="already running training"):
            with registry.job("a", "generation"):
                pass
        with registry.job("b", "generation"):  # another session is not blocked
            pass
    assert not session.busy
    with registry.job("a", "generation"):  # free again after the first job ended
        pass


def test_job_lock_is_released_when_the_job_fails():
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=60)
    with pytest.raises(RuntimeError):
        with registry.job("a", "training"):
            raise RuntimeError("boom")
    with registry.job("a", "training"):
        pass


def test_concurrent_jobs_in_one_session_admit_exactly_one():
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=60)
    entered, refused, release = [], [], threading.Event()

    def worker():
        try:
            with registry.job("a", "training"):
                entered.append(1)
                release.wait(5)
        except gr.Error:
            refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(entered) + len(refused) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(5)
    assert len(entered) == 1 and len(refused) == 4


def test_requests_without_a_session_are_refused():
    registry = SessionRegistry(memory_budget=10 * MODEL, ttl_s=60)

    class NoSession:
        session_hash = None

    with pytest.raises(gr.Error, match="no session"):
        registry.get(NoSession())


# ---------------------------------------------------------------- settings


def test_settings_read_the_environment_and_keyword_overrides():
    settings = Settings.from_env({"PLAYGROUND_MAX_LAYERS": "3", "PLAYGROUND_SESSION_TTL_S": "5.5"}, max_heads=2)
    assert (settings.max_layers, settings.session_ttl_s, settings.max_heads) == (3, 5.5, 2)
    assert not settings.caps_lifted


def test_settings_reject_bad_environment_values():
    with pytest.raises(ValueError, match="PLAYGROUND_MAX_LAYERS='many'"):
        Settings.from_env({"PLAYGROUND_MAX_LAYERS": "many"})
    with pytest.raises(ValueError, match="model_memory_bytes must be positive"):
        Settings(model_memory_bytes=0)


def test_local_settings_lift_the_caps():
    server, laptop = Settings.from_env({}), Settings.local({})
    assert laptop.caps_lifted and laptop.max_layers > server.max_layers and laptop.max_params > server.max_params
    assert Settings.local({"PLAYGROUND_MAX_LAYERS": "9"}).max_layers == 24  # --no-caps wins over the env


def test_cap_hint_names_the_cap_and_how_to_lift_it():
    hint = Settings(max_layers=6).cap_hint("max_layers")
    assert "6" in hint and "--no-caps" in hint and "PLAYGROUND_MAX_LAYERS" in hint
    with pytest.raises(ValueError):
        Settings().cap_hint("session_ttl_s")


# ---------------------------------------------------------------- validate


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "nan", "abc", None, [], True])
def test_number_rejects_what_is_not_a_finite_number(value):
    with pytest.raises(gr.Error, match="Temperature must be a"):
        validate.number(value, "Temperature", 0, 2)


def test_number_checks_the_range_and_names_the_cap():
    assert validate.number("0.5", "Top-p", 0, 1) == 0.5
    with pytest.raises(gr.Error, match="Top-p must be at least 0"):
        validate.number(-1, "Top-p", 0, 1)
    with pytest.raises(gr.Error, match="Layers must be at most 6.*--no-caps"):
        validate.integer(7, "Layers", 1, 6, cap=Settings(max_layers=6).cap_hint("max_layers"))


def test_numbers_in_messages_are_written_in_full():
    # :g wrote both of these as 2.14748e+09: a bound and a value just past it looked alike
    with pytest.raises(gr.Error, match=r"Seed must be at most 2147483647, got 2147483648\."):
        validate.integer(2**31, "Seed", 0, 2**31 - 1)
    with pytest.raises(gr.Error, match=r"whole number, got 123456789\.5\."):
        validate.integer(123456789.5, "Steps", 1, 10**9)
    with pytest.raises(gr.Error, match=r"at least 1e-06, got 1e-07\."):
        validate.number(1e-7, "Learning rate", 1e-6, 1.0)
    with pytest.raises(gr.Error, match=r"at most 1000000000, got 1e\+300\."):
        validate.integer(1e300, "Steps", 1, 10**9)


def test_integer_accepts_whole_floats_only():
    assert validate.integer(4.0, "Heads", 1, 8) == 4 and isinstance(validate.integer(4.0, "Heads", 1, 8), int)
    with pytest.raises(gr.Error, match="whole number"):
        validate.integer(4.5, "Heads", 1, 8)


def test_optional_integer_treats_empty_and_zero_as_off():
    assert validate.optional_integer(None, "Top-k", 1, 10) is None
    assert validate.optional_integer(0, "Top-k", 1, 10) is None
    assert validate.optional_integer(3.0, "Top-k", 1, 10) == 3
    with pytest.raises(gr.Error):
        validate.optional_integer(-2, "Top-k", 1, 10)


def test_text_checks_type_emptiness_and_length():
    assert validate.text("hi", "Prompt", 5) == "hi"
    assert validate.text(None, "Prompt", 5, allow_empty=True) == ""
    with pytest.raises(gr.Error, match="Prompt is empty"):
        validate.text("   ", "Prompt", 5)
    with pytest.raises(gr.Error, match="6 characters; the limit is 5"):
        validate.text("abcdef", "Prompt", 5)
    with pytest.raises(gr.Error, match="must be text"):
        validate.text(12, "Prompt", 5)


def test_choice_accepts_only_the_options():
    assert validate.choice("char", "Tokenizer", ["char", "gpt2"]) == "char"
    with pytest.raises(gr.Error, match="Tokenizer must be one of char, gpt2"):
        validate.choice("bpe", "Tokenizer", ["char", "gpt2"])


def test_user_errors_become_gradio_errors_and_others_do_not():
    from core.data import DataError

    with pytest.raises(gr.Error, match="too short"):
        with validate.user_errors():
            raise DataError("too short")
    with pytest.raises(KeyError):
        with validate.user_errors():
            raise KeyError("a bug stays a bug")
