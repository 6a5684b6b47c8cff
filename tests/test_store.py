"""The state store (issue 24): tokens the server makes are the only keys, no byte of a client's value
reaches a path, the budget holds with least-recently-written eviction and tombstones, two apps share
one store, and a store that cannot be written switches itself off without losing anything in memory."""

import os
import shutil
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from core.checkpoint import encode
from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import CharTokenizer
from playground.store import StateStore, new_token, open_store, valid_token


def encoded(seed: int = 0, n_embd: int = 16):
    tokenizer = CharTokenizer("abc|\n")
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, n_embd=n_embd, block_size=8),
                generator=torch.Generator().manual_seed(seed))
    return encode(model, tokenizer, {"steps": seed})


def test_only_tokens_the_server_makes_are_taken():
    token = new_token()
    assert valid_token(token) == token and len(token) == 43 and new_token() != token
    for forged in (None, "", 7, ["x" * 43], "../" * 15, "a" * 42, "a" * 44, "a" * (1 << 20),
                   "A" * 42 + "/", "A" * 42 + ".", "A" * 42 + "\x00", token + "\n"):
        assert valid_token(forged) is None, repr(forged)[:60]


def test_an_entry_is_named_by_a_hash_and_holds_the_latest_archive(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = new_token()
    assert store.fetch(token, tmp_path) is None and not store.evicted(token)
    first, second = encoded(1), encoded(2)
    store.writer.submit(token, first)
    store.writer.submit(token, second)  # a newer state replaces one still waiting, or the written one
    assert store.writer.flush()
    names = sorted(os.listdir(tmp_path / "store"))
    assert token not in "".join(names) and all(n == "browser-secret" or n[:64].isalnum() for n in names)
    fetched = store.fetch(token, tmp_path)
    assert fetched is not None
    with zipfile.ZipFile(fetched) as archive:
        assert archive.read("model.safetensors") == second.weights
    assert store.fetch(new_token(), tmp_path) is None  # another token opens nothing


def test_the_budget_evicts_the_least_recently_written_and_leaves_a_tombstone(tmp_path):
    probe = StateStore(str(tmp_path / "probe"), budget_bytes=10**9)
    probe.writer.submit(new_token(), encoded(0))
    probe.writer.flush()
    size = probe.used_bytes()
    store = StateStore(str(tmp_path / "store"), budget_bytes=int(2.5 * size))  # room for two
    tokens = [new_token() for _ in range(3)]
    for seed, token in enumerate(tokens):
        store.writer.submit(token, encoded(seed))
        assert store.writer.flush()
        time.sleep(0.02)  # distinct modification times
    assert store.used_bytes() <= store.budget_bytes
    assert store.fetch(tokens[0], tmp_path) is None and store.evicted(tokens[0])
    assert all(store.fetch(t, tmp_path) is not None and not store.evicted(t) for t in tokens[1:])
    store.writer.submit(tokens[0], encoded(0))  # it comes back: no longer evicted; the next oldest goes
    assert store.writer.flush()
    assert not store.evicted(tokens[0]) and store.evicted(tokens[1])


def test_two_apps_share_one_store_and_its_secret():
    url = f"memory://shared-{new_token()[:8]}"
    one, other = StateStore(url, 10**9), StateStore(url, 10**9)
    assert one.secret() == other.secret() and len(one.secret()) >= 32
    token = new_token()
    one.writer.submit(token, encoded(3))
    assert one.writer.flush()
    assert other.fetch(token, Path(os.environ.get("TMPDIR", "/tmp"))) is not None


@pytest.mark.parametrize("url", ["memory://", "folder"])
def test_servers_starting_together_on_an_empty_store_agree_on_its_secret(url, tmp_path):
    url = f"memory://race-{new_token()[:8]}" if url == "memory://" else str(tmp_path / "store")
    stores = [StateStore(url, 10**9) for _ in range(8)]
    start = threading.Barrier(len(stores))

    def secret(store: StateStore) -> str:
        start.wait()
        return store.secret()

    with ThreadPoolExecutor(len(stores)) as pool:
        assert len(set(pool.map(secret, stores))) == 1


def test_an_unwritable_store_switches_off_and_says_why(tmp_path, caplog):
    assert open_store("off", 10**9) is None
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert open_store(str(blocker / "store"), 10**9) is None  # cannot be made: memory only, logged
    assert "cannot be opened" in caplog.text
    root = tmp_path / "store"
    store = StateStore(str(root), 10**9)
    shutil.rmtree(root)
    root.write_text("the folder became a file")  # every write fails from now on
    store.writer.submit(new_token(), encoded(4))
    assert store.writer.flush()
    assert not store.working and "memory only" in caplog.text
    store.writer.submit(new_token(), encoded(5))  # ignored, quietly: the app already says so
    assert store.writer.flush(timeout=1)


@pytest.mark.parametrize("hostile", ["../../etc/passwd", "/" * 43, "." * 43])
def test_path_shaped_values_never_reach_the_filesystem(tmp_path, hostile):
    store = StateStore(str(tmp_path / "store"), 10**9)
    assert valid_token(hostile) is None
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert store.fetch(valid_token(hostile) or new_token(), tmp_path) is None
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
