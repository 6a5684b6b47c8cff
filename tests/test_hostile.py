"""A hostile client against the real running app, over raw HTTP as an attacker would send it.

Every request here picks its own session hash and its own JSON (Gradio's queue accepts both from
anyone), so these tests see what a public Space sees: paths in session hashes, checkpoints that
lie about their size, floods of new sessions, malformed fields, and sessions left behind.
"""

import io
import json
import logging
import math
import os
import time
import zipfile
from pathlib import Path

import httpx
import pytest
import torch

from core.checkpoint import save_archive
from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import CharTokenizer
from playground.settings import Settings
from support.app import GENERATE, form, serve, tiny_model_bytes, wait_until
from support.hostile import Hostile, Server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def app(running_app):
    return Hostile(running_app[1])


def checkpoint_bytes(model_config: dict | None = None, weights: bytes | None = None) -> bytes:
    """A real tiny checkpoint .zip, optionally with its config or weights replaced."""
    tokenizer = CharTokenizer.from_text("ab")
    model = GPT(GPTConfig(vocab_size=2, block_size=4, n_layer=1, n_head=1, n_embd=8))
    buffer = io.BytesIO()
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"hostile-{os.getpid()}-{time.monotonic_ns()}.zip"
    try:
        save_archive(path, model, tokenizer)
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as dst:
            description = json.loads(src.read("config.json"))
            if model_config is not None:
                description["model"] = {**description["model"], **model_config}
            dst.writestr("config.json", json.dumps(description))
            dst.writestr("model.safetensors", weights if weights is not None else src.read("model.safetensors"))
    finally:
        path.unlink(missing_ok=True)
    return buffer.getvalue()


# ---------------------------------------------------------------- 1. the session hash is never a path


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def hostile_hashes(canary: Path) -> list[str]:
    climb = "../" * 12 + str(canary).lstrip("/")  # from any folder depth up to / and down to the canary
    return [str(canary), climb, "..", "../..", "a\x00/../../b", "é/../../ü", "\\..\\..\\windows", "x" * 100]


def test_session_hashes_that_look_like_paths_touch_nothing_outside_the_app(running_app, app, tmp_path):
    canary = tmp_path / "canary"
    (canary / "inner").mkdir(parents=True)
    (canary / "keep.txt").write_text("still here")
    (canary / "inner" / "also.txt").write_text("me too")
    before = snapshot(canary)
    upload = app.upload("model.zip", checkpoint_bytes())
    for session_hash in hostile_hashes(canary):
        trained = app.ok("train", form(), session_hash)
        assert trained[0].startswith("Done"), trained[0]
        saved = app.ok("save_checkpoint", [], session_hash)[0]
        assert session_hash not in saved["path"] and "canary" not in saved["path"]
        assert app.ok("load_checkpoint", [upload], session_hash)[0].startswith("Loaded")
        if app.close_page(session_hash) == 200:  # the page's unload frees the session and its files
            wait_until(lambda: running_app[0].registry.peek(session_hash) is None)
        assert snapshot(canary) == before, session_hash
    assert snapshot(canary) == before


def test_overlong_session_hashes_are_refused_with_a_message(app):
    message = app.error("generate", GENERATE, "h" * 1000)
    assert "session hash is 1,000 characters" in message


# ---------------------------------------------------------------- 2. checkpoints that lie about their size


@pytest.mark.parametrize("model_config, message", [
    (dict(n_embd=4096), "embedding size must be at most 256"),
    (dict(n_embd=1_048_576), "embedding size must be at most 256"),
    (dict(n_layer=10_000), "layers must be at most 6"),
    (dict(vocab_size=3_000_000), "tokenizer has 2 tokens but the model expects 3000000"),
    (dict(mlp_hidden=10**12), "the limit is"),  # a feed-forward a trillion wide: counted on the meta device
    (dict(window=10**18), "window must be at most"),
    (dict(n_kv_head=3), "multiple of n_kv_head"),
    (dict(position="../../etc/passwd"), "position must be one of"),
])
def test_a_tiny_checkpoint_claiming_a_huge_model_is_refused_before_it_is_built(app, model_config, message):
    upload = app.upload("huge.zip", checkpoint_bytes(model_config))
    assert len(checkpoint_bytes(model_config)) < 5000
    assert message in app.error("load_checkpoint", [upload], "lying-config").lower().replace("n_embd", "embedding size")


def test_a_zip_bomb_is_refused_before_it_is_unpacked(app):
    bomb = checkpoint_bytes(weights=b"\0" * 300_000_000)  # 300 MB of zeros pack into about 300 KB
    assert len(bomb) < 1_000_000
    message = app.error("load_checkpoint", [app.upload("bomb.zip", bomb)], "bomber")
    # The bound comes from the model its config describes: its weights' exact size plus a header.
    assert "model.safetensors is 300,000,000 bytes; the limit is 73,960" in message


def test_non_finite_weights_and_bad_histories_are_refused(app):
    model = GPT(GPTConfig(vocab_size=2, block_size=4, n_layer=1, n_head=1, n_embd=8))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"nan-{os.getpid()}.zip"
    try:
        save_archive(path, model, CharTokenizer.from_text("ab"))
        message = app.error("load_checkpoint", [app.upload("nan.zip", path.read_bytes())], "nan-loader")
    finally:
        path.unlink(missing_ok=True)
    assert "nan" in message.lower() or "finite" in message.lower()

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"history-{os.getpid()}.zip"
    try:
        save_archive(path, GPT(GPTConfig(vocab_size=2, block_size=4, n_layer=1, n_head=1, n_embd=8)),
                     CharTokenizer.from_text("ab"), meta={"history": [{"step": "abc", "train_loss": 1.0}]})
        message = app.error("load_checkpoint", [app.upload("history.zip", path.read_bytes())], "history-loader")
    finally:
        path.unlink(missing_ok=True)
    assert "step" in message


def test_checkpoints_load_one_at_a_time(running_app, app):
    fns = running_app[0].fns
    load, save = fns[app.index["load_checkpoint"]], fns[app.index["save_checkpoint"]]
    assert load.concurrency_limit == 1 and save.concurrency_id == load.concurrency_id


# ---------------------------------------------------------------- 3. a flood cannot evict a learner


def test_a_flood_of_new_sessions_does_not_evict_a_trained_model():
    # memory for three FORM models (and a bit): the victim and two trainers fill it
    settings = Settings.from_env({}, model_memory_bytes=3 * tiny_model_bytes() + 1000, max_light_sessions=10)
    with serve(settings) as (demo, url):
        app = Hostile(url)
        app.ok("train", form(), "victim")
        for i in range(40):  # cheap calls, each from a new session, 13 times the light cap
            app.ok("baby_gpt_walk", ["", 5, 0, 0, 1.0], f"flood-{i}")
        counts = demo.registry.counts()
        assert (counts["sessions"], counts["models"]) == (11, 1)
        tokens, text, status = app.ok("generate", GENERATE, "victim")
        assert text.startswith("\nqwhzbkad|") and "tokens" in status  # the line break the tab puts first
        # Trainers fill the memory for models; the victim, in use a moment ago, is not pushed out.
        for i in range(2):
            app.ok("train", form(), f"trainer-{i}")
        message = app.error("train", form(), "one-too-many")
        assert "server is full" in message
        assert app.ok("generate", GENERATE, "victim")[1].startswith("\nqwhzbkad|")


# ---------------------------------------------------------------- 4. every malformed field gets a message


FIELD_NAMES = {  # the Train form's fields as the error messages name them
    "n_layer": "Layers", "n_head": "Heads", "n_embd": "Embedding size", "block_size": "Block size",
    "dropout": "Dropout", "steps": "Steps", "batch_size": "Batch size", "learning_rate": "Learning rate",
    "seed": "Seed", "warmup": "Warmup steps", "eval_interval": "Evaluate every", "weight_decay": "Weight decay",
    "grad_clip": "Gradient clip", "n_kv_head": "Key/value heads", "window": "Window",
}


@pytest.mark.parametrize("bad", ["abc", None, [], {}, True, math.nan, math.inf, 1e300, -5, 2.5])
def test_every_numeric_training_field_answers_bad_values_with_its_name(app, bad):
    for field, name in FIELD_NAMES.items():
        if bad == 2.5 and field == "grad_clip":
            continue  # 2.5 is a fine gradient clip
        message = app.error("train", form(**{field: bad}), "malformed")
        assert name in message, (field, bad, message)


SWITCH_NAMES = {"causal": "Causal mask", "scale_attention": "Scale by √d",
                "use_position_embedding": "Position embeddings"}


@pytest.mark.parametrize("bad", ["false", "False", "true", "", "0", None, [], {}, 2, -1, 0.5, math.nan])
def test_every_break_it_switch_takes_only_true_or_false(app, bad):
    for field, name in SWITCH_NAMES.items():  # a string "false" must never count as True
        message = app.error("train", form(**{field: bad}), "malformed")
        assert name in message and "True, False" in message, (field, bad, message)


@pytest.mark.parametrize("field, name", [("position", "Positions"), ("norm", "Normalisation"),
                                         ("activation", "Feed-forward")])
@pytest.mark.parametrize("bad", ["sinusoidal", "", None, 3, ["rope"], {"a": 1}, "x" * 10_000])
def test_every_modern_part_takes_only_its_choices(app, field, name, bad):
    message = app.error("train", form(**{field: bad}), "malformed")
    assert f"{name} must be one of" in message and len(message) < 600, message


def test_modern_parts_keep_to_the_caps_and_to_each_other(app):
    assert "Window" in app.error("train", form(window=10**9), "malformed")
    assert "Key/value heads" in app.error("train", form(n_kv_head=999), "malformed")
    assert "multiple of n_kv_head" in app.error("train", form(n_head=2, n_kv_head=3, steps=1), "malformed")


@pytest.fixture(scope="module")
def generator(app):
    """A session with a trained tiny model."""
    app.ok("train", form(), "generator")
    return "generator"


@pytest.mark.parametrize("index, bad, name", [
    (0, 12345, "Prompt"), (1, "abc", "Max new tokens"), (1, None, "Max new tokens"), (2, math.nan, "Temperature"),
    (2, [], "Temperature"), (3, math.inf, "Top-k"), (3, True, "Top-k"), (4, "x", "Top-p"), (5, 0.5, "Seed"),
    (5, math.nan, "Seed"), (6, "yes", "Stop at the end of the answer line"),
    (6, 1, "Stop at the end of the answer line"),
])
def test_every_generation_field_answers_bad_values_with_its_name(app, generator, index, bad, name):
    data = list(GENERATE)
    data[index] = bad
    assert name in app.error("generate", data, generator)


@pytest.mark.parametrize("api_name, data", [
    ("preset", ["no-such-preset"]), ("preset", [None]), ("attention", [None]), ("attention_head", ["a", "b"]),
    ("baby_gpt_walk", [[], "x", None, {}, "hot"]), ("baby_gpt_scrub", [1e9, 1.0]), ("inspect_token", ["x"]),
    ("train", form()[:3]),  # too few inputs
    ("load_checkpoint", [{"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}]),
    ("load_checkpoint", ["not a file"]),
])
def test_no_endpoint_answers_with_an_empty_error(app, api_name, data):
    app.error(api_name, data, "malformed-elsewhere")  # asserts the message is not empty


def test_an_examples_table_fills_its_row_and_refuses_rows_that_are_not_there(app):
    """Gradio's own loader of an Examples row (not queued: the page posts to run/predict) keeps its
    preprocessing: the patching pairs fill both boxes, and a row that is not there gets a message."""
    def load(loader: str, data: list) -> httpx.Response:
        return httpx.post(f"{app.url}gradio_api/run/predict", timeout=30, json={
            "data": data, "fn_index": app.index[loader], "session_hash": "examples-table"})

    pairs = next(name for name in app.index
                 if name.startswith("load_example") and len(load(name, [1]).json().get("data", [])) == 2)
    clean, corrupted = (box["value"] for box in load(pairs, [1]).json()["data"])
    assert "Mary" in clean and "Mary" in corrupted and clean != corrupted
    for bad in ([99], ["abc"], [{}], [None]):
        answer = load(pairs, bad)
        assert answer.status_code != 200 and answer.json()["error"], (bad, answer.text)


@pytest.mark.parametrize("data, name", [
    (["abc", 1], "Steps per rung"), ([None, 1], "Steps per rung"), ([[], 1], "Steps per rung"),
    ([{}, 1], "Steps per rung"), ([math.nan, 1], "Steps per rung"), ([1e9, 1], "Steps per rung"),
    ([-5, 1], "Steps per rung"), ([150.5, 1], "Steps per rung"), ([100, math.inf], "Seed"), ([100, -1], "Seed"),
    ([100, 2**64], "Seed"), ([100, "x"], "Seed"),
])
def test_every_ladder_field_answers_bad_values_with_its_name_and_nothing_climbs(running_app, app, data, name):
    assert name in app.error("ladder", data, "hostile-climber")
    session = running_app[0].registry.peek("hostile-climber")
    assert session is None or session.ladder is None


def test_a_tiny_temperature_samples_the_likeliest_tokens(app):
    app.ok("train", form(steps=200), "cold")
    _, text, _ = app.ok("generate", ["qwhzbkad|", 8, 1e-300, 0, 1.0, 1, True], "cold")
    _, greedy, _ = app.ok("generate", ["qwhzbkad|", 8, 0, 0, 1.0, 1, True], "cold")
    assert text == greedy


# ---------------------------------------------------------------- 5. the log: one line per user error


def test_user_errors_are_one_short_log_line_and_huge_inputs_are_not_echoed(app, caplog, capfd):
    huge = "z" * 10_000_000
    with caplog.at_level(logging.INFO, logger="playground"):
        message = app.error("preset", [huge], "huge-input")
    assert len(message) < 1000 and "Preset" in message
    lines = [r.getMessage() for r in caplog.records if r.name == "playground" and "/preset" in r.getMessage()]
    assert len(lines) == 1 and len(lines[0]) < 500 and "\n" not in lines[0]
    assert "Traceback" not in capfd.readouterr().err


# ---------------------------------------------------------------- 6. divergence restores sound weights


def test_a_diverged_run_goes_back_to_sound_weights_and_trains_on(app):
    diverging = form(learning_rate=1.0, grad_clip=0, warmup=0, steps=300, eval_interval=20, n_embd=32)
    message = app.error("train", diverging, "diverger")
    assert "diverged" in message and "restored to step" in message
    restored = int(message.split("restored to step ")[1].split(",")[0])
    movie = app.call("attention_movie", [], "diverger")  # the movie goes back with the weights
    steps = movie["output"]["data"][0]["steps"] if movie["success"] else []  # none left: "no movie yet"
    assert movie["success"] or "no attention movie yet" in movie["output"]["error"], movie
    assert all(step <= restored for step in steps), (steps[-3:], restored)
    final = app.ok("train", form(learning_rate=1e-3, grad_clip=1.0, steps=400, n_embd=32), "diverger")
    loss = float(final[0].split("training loss ")[1].split(",")[0].rstrip("."))
    assert loss < 4.0, final[0]  # ln(vocabulary) is about 3.3 for the copy task; a wrecked model is far above


# ---------------------------------------------------------------- 7. sessions left behind are freed


def test_sessions_without_a_browser_are_freed_after_a_short_idle_time():
    with serve(Settings.from_env({}, api_ttl_s=1.0)) as (demo, url):
        app = Hostile(url)
        app.ok("train", form(), "left-behind")
        assert demo.registry.counts()["models"] == 1
        deadline = time.monotonic() + 20
        while demo.registry.counts()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert demo.registry.counts() == {"sessions": 0, "models": 0, "model_bytes": 0}
        assert "expired" in app.error("generate", GENERATE, "left-behind")


def test_gradio_state_of_refused_and_idle_hashes_is_swept():
    # idle states go after 4 s (long enough for a loaded machine to make both calls first)
    with serve(Settings.from_env({}, api_ttl_s=4.0)) as (demo, url):
        app = Hostile(url)
        app.error("generate", GENERATE, "h" * 1000)  # refused by the registry, but Gradio kept a state for it
        assert "h" * 1000 in demo.state_holder.session_data
        app.ok("preset", ["repeat"], "passer-by")  # a call that never makes a session
        assert "passer-by" in demo.state_holder.session_data
        deadline = time.monotonic() + 20
        while demo.state_holder.session_data and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not demo.state_holder.session_data  # swept, and the sweeper survived the long hash
        app.ok("train", form(), "later")  # the server still works
        deadline = time.monotonic() + 20
        while demo.registry.counts()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert demo.registry.counts()["sessions"] == 0  # and the sweeping goes on


# ---------------------------------------------------------------- 8. inside a head: steps, knock-outs, lens, export


@pytest.fixture(scope="module")
def analysed(app):
    """A session with a trained tiny model (1 layer, 2 heads) and a text analysed."""
    app.ok("train", form(), "inside")
    app.ok("attention", ["qwhzbkad|qwhzbkad"], "inside")
    return "inside"


@pytest.mark.parametrize("api_name, data, name", [
    ("head_steps", [1e9, 0, 0, False, False], "Layer"), ("head_steps", ["x", 0, 0, False, False], "Layer"),
    ("head_steps", [0, -3, 0, False, False], "Head"), ("head_steps", [0, 0, 10**12, False, False], "Query token"),
    ("head_steps", [0, 0, math.nan, False, False], "Query token"), ("head_steps", [0, 0, 0, "yes", False], "÷√d"),
    ("head_steps", [0, 0, 0, False, {"a": 1}], "Without the mask"), ("head_steps", [0, 0], "inputs"),
    ("ablate", ["L0 H0", "zero"], "Heads must be a list"), ("ablate", [["L0 H0"] * 10_000, "zero"], "Heads lists"),
    ("ablate", [["L0 H0", "L0 H0"], "zero"], "listed twice"), ("ablate", [["L5 H0"], "zero"], "no L5 H0"),
    ("ablate", [[None], "zero"], "Heads"), ("ablate", [["L0 H0"], "max"], "Mode"), ("ablate", [{}, None], "Mode"),
    ("head_importance", ["../../etc"], "Mode"), ("logit_lens", [1e9], "Top predictions"),
    ("logit_lens", ["x"], "Top predictions"), ("logit_lens", [-1], "Top predictions"),
    ("logit_attribution", [10**12, ""], "Query token"), ("logit_attribution", [math.nan, ""], "Query token"),
    ("logit_attribution", [0, "ab"], "Alternative"), ("logit_attribution", [0, "€"], "Alternative"),
    ("logit_attribution", [0, ["a"]], "Alternative"), ("logit_attribution", [0, "a" * 10**6], "Alternative"),
    ("patch", ["qwhz|", "qwh|"], "Corrupted text"), ("patch", ["qwhz|", "qwh€|"], "Corrupted text"),
    ("patch", [{"a": 1}, "qwhz|"], "Clean text"), ("patch", ["q" * 10**6, "w" * 10**6], "Clean text"),
    ("patch", ["q" * 300, "w" * 300], "Clean text"), ("patch", ["qwhz|", "qwhz|"], "nothing to restore"),
    ("circuits", [1e9, 0], "Layer"), ("circuits", [0, math.nan], "Head"), ("circuits", ["../", 0], "Layer"),
])
def test_every_inside_field_answers_bad_values_with_its_name(app, analysed, api_name, data, name):
    assert name in app.error(api_name, data, analysed)


def test_the_inside_tools_answer_and_export_under_the_servers_names(app, analysed):
    note, table, vectors = app.ok("head_steps", [0, 1, 15, True, True], analysed)  # the context: 16 tokens
    assert "Layer 0, head 1" in note and json.loads(table["plot"])["data"][0]["x"][3] == "softmax"
    assert "the loss on the analysed text" in app.ok("ablate", [["L0 H1"], "mean"], analysed)[0]
    assert json.loads(app.ok("head_importance", ["mean"], analysed)[0]["plot"])["data"][0]["type"] == "heatmap"
    assert "really comes next" in app.ok("logit_lens", [3], analysed)[0]
    assert "The largest direct shares" in app.ok("logit_attribution", [12, ""], analysed)[0]
    # 20 steps barely move this model's answer: whether shares are drawn or the gap is named too small to share
    # (core.attribution.MIN_PATCH_GAP, tested on trained models elsewhere), the tool answers under its name
    patched = app.ok("patch", ["qwhzbkad|qwhzb", "qwhzbxad|qwhzb"], analysed)[0]
    assert "Clean, the model prefers" in patched and ("brings back the most" in patched or "none is drawn" in patched)
    assert "copying score" in app.ok("circuits", [0, 1], analysed)[0]
    hostile = "../" * 6 + "tmp/inside-export"
    app.ok("train", form(), hostile)
    app.ok("attention", ["qwhzbkad|"], hostile)
    _, files = app.ok("attention_export", [], hostile)
    names = sorted(Path(f["path"]).name for f in files)
    assert names == ["attention-analysis.json", "attention-weights.csv", "attention-weights.npy"]
    assert all("inside-export" not in f["path"] and ".." not in f["path"] for f in files)
    assert "Analyse a text first" in app.error("logit_lens", [5], "never-analysed")


# ---------------------------------------------------------------- compare runs and the movie's GIF


def test_compare_and_the_gif_answer_only_for_the_callers_own_runs(app):
    app.ok("train", form(steps=10), "comparer")
    app.ok("train_new", form(steps=10, scale_attention=False), "comparer")
    (mine,) = app.ok("compare_runs", [], "comparer")
    assert [run["run"] for run in mine["runs"]] == [1, 2] and mine["runs"][1]["config"]["scale_attention"] is False
    (theirs,) = app.ok("compare_runs", [], "a-stranger")  # another session sees none of it
    assert theirs["runs"] == [] and theirs["bytes"] == 0
    loss, attention, table = app.ok("compare_show", [[1, 2], 0], "comparer")
    assert [row[0] for row in table["data"]] == ["Run 1", "Run 2"]
    assert app.ok("compare_show", [[1, 2], 0], "a-stranger")[2]["data"] in ([], [[""] * 7])  # nothing to show
    gif = app.ok("attention_movie_gif", [], "comparer")[0]
    assert gif["path"].endswith(".gif") and httpx.get(gif["url"], timeout=30).content[:6] == b"GIF89a"
    assert "no attention movie yet" in app.error("attention_movie_gif", [], "a-stranger")


@pytest.mark.parametrize("data, name", [
    (["1", 0], "Runs"), ([list(range(50)), 0], "Runs"), ([["x"], 0], "Run"), ([[1.5], 0], "Run"),
    ([[1], -1], "Layer"), ([[1], 10**9], "Layer"), ([[1], None], "Layer"), ([[1], math.nan], "Layer"),
])
def test_every_compare_field_answers_bad_values_with_its_name(app, data, name):
    assert name in app.error("compare_show", data, "comparer-bad")


# ---------------------------------------------------------------- events that are not there, and the unload


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """`python -m playground` in a process of its own, everything it prints in a file: (server, log)."""
    folder = tmp_path_factory.mktemp("logged")
    server = Server(folder / "store", log=folder / "server.log")
    yield server, folder / "server.log"
    server.kill()


def test_calls_to_events_the_app_does_not_have_are_refused_in_one_log_line(logged):
    server, log = logged
    before = len(log.read_text().splitlines())
    calls = [  # every way Gradio takes a call: by name, by name with keywords, by the index the page sends
        lambda i: ("call/reset", {"data": []}), lambda i: (f"call/v2/reset-{i}", {}),
        lambda i: (f"run/no_such_{i}", {"data": []}), lambda i: ("run/predict", {"data": [], "fn_index": 10_000 + i}),
        lambda i: ("queue/join", {"data": [], "fn_index": 10_000 + i, "session_hash": "flood"}),
        lambda i: ("queue/join", {"data": [], "fn_index": -i, "session_hash": "flood"}),
    ]
    for i in range(200):
        path, body = calls[i % len(calls)](i + 1)
        answer = httpx.post(f"{server.url}gradio_api/{path}", json=body, timeout=30)
        assert answer.status_code == 404, (path, answer.status_code, answer.text[:300])
        assert answer.json()["detail"].startswith("This app has no event "), answer.text
    # (Gradio's launch banner, "* To create a public link ...", may land late: it is not a line of ours)
    lines = [line for line in log.read_text().splitlines()[before:] if line.strip() and not line.startswith("* ")]
    assert len(lines) <= 200 and not [line for line in lines if "Traceback" in line], "\n".join(lines[:80])
    assert "refused /gradio_api/call/reset: This app has no event named /reset." in lines[0]


def test_only_the_pages_own_unload_frees_its_session(logged):
    server, _ = logged
    app = server.app
    app.ok("train", form(), "kept")
    # The unload event by the index the page would send, and by its name
    assert "freed when its page closes" in app.error("free_session", [], "kept")
    event = httpx.post(f"{server.url}gradio_api/call/free_session", json={"data": [], "session_hash": "kept"},
                       timeout=30).json()["event_id"]
    answer = httpx.get(f"{server.url}gradio_api/call/free_session/{event}", timeout=30).text
    assert "event: error" in answer and "freed when its page closes" in answer, answer
    assert app.ok("generate", GENERATE, "kept")[1].startswith("\nqwhzbkad|")  # the model is still there
    assert app.close_page("kept") == 200  # the tab closes: now it goes
    wait_until(lambda: "There is no model yet" in str(app.ok("generate", GENERATE, "kept")))


def test_seeds_past_the_bound_are_named_in_whole_numbers(app):
    message = app.error("train", form(seed=2**31), "seedy")
    assert "Seed must be at most 2147483647, got 2147483648." in message, message
