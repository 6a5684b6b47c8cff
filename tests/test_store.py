"""The state store (issue 24): tokens the server makes are the only keys, no byte of a client's value
reaches a path, the budget holds with least-recently-written eviction and tombstones, two apps share
one store, and a store that cannot be written switches itself off without losing anything in memory."""

import errno
import hashlib
import logging
import os
import shutil
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fsspec
import pytest
import torch
from fsspec.implementations.memory import MemoryFileSystem

from core.checkpoint import encode
from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import CharTokenizer
from playground import store as store_module
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


class FullDisk(MemoryFileSystem):
    """fsspec's in-memory filesystem as a disk that fills up (while `full`): a file is created, but writing its
    bytes fails, as on a real full disk (`fulldisk://`)."""

    protocol = "fulldisk"
    full = False

    def _open(self, path, mode="rb", **kwargs):
        if not (self.full and mode[0] in "wx"):
            return super()._open(path, mode, **kwargs)
        file = super()._open(path, mode, **{k: v for k, v in kwargs.items() if k != "data"})  # there, empty

        def no_space(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        if kwargs.get("data"):
            no_space(kwargs["data"])
        file.write = no_space
        return file


fsspec.register_implementation("fulldisk", FullDisk, clobber=True)


def listed(store: StateStore) -> list[str]:
    return sorted(info["name"].rsplit("/", 1)[-1] for info in store.fs.ls(store.root, detail=True))


def store_url(kind: str, tmp_path: Path) -> str:
    """A fresh store: a local folder, or (standing for a shared one) fsspec's memory."""
    return f"memory://race-{new_token()[:8]}" if kind == "memory://" else str(tmp_path / "store")


DAMAGED_SECRETS = {"empty": b"", "garbage": b"\xff\xfe not a secret \x00\n", "short": b"A" * 42}


@pytest.mark.parametrize("damage", DAMAGED_SECRETS)
@pytest.mark.parametrize("kind", ["memory://", "folder"])
def test_servers_starting_together_on_a_damaged_secret_agree_on_its_replacement(kind, damage, tmp_path,
                                                                                monkeypatch, caplog):
    monkeypatch.setattr(store_module, "SECRET_WAIT_S", 0.3)  # past this, a secret nobody is writing is damaged
    url = store_url(kind, tmp_path)
    first = StateStore(url, 10**9)
    first.fs.pipe_file(first._path("browser-secret"), DAMAGED_SECRETS[damage])
    stores = [StateStore(url, 10**9) for _ in range(8)]
    start = threading.Barrier(len(stores))

    def secret(store: StateStore) -> str:
        start.wait()
        return store.secret()

    with caplog.at_level(logging.WARNING, logger="playground"), ThreadPoolExecutor(len(stores)) as pool:
        made = set(pool.map(secret, stores))
    assert len(made) == 1 and valid_token(next(iter(made)))
    assert caplog.text.count("browser-secret is damaged") == len(stores)  # one warning per server
    assert first.fs.cat_file(first._path("browser-secret.1")).decode() in made  # the replacement, kept
    assert listed(first) == ["browser-secret", "browser-secret.1"]  # the damaged one stays for the operator
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="playground"):
        assert StateStore(url, 10**9).secret() in made  # a later start reads it, quietly
    assert "damaged" not in caplog.text and all(store.working for store in stores)


def test_a_first_start_on_a_full_disk_leaves_no_empty_secret_and_serves_from_memory(monkeypatch, caplog):
    url = f"fulldisk://full-{new_token()[:8]}"
    monkeypatch.setattr(FullDisk, "full", True)
    store = StateStore(url, 10**9)
    assert valid_token(store.secret())  # this process's own: the page can still keep a token
    assert not store.working and "browser-secret cannot be written" in caplog.text and "memory only" in caplog.text
    assert listed(store) == []  # no 0-byte secret for every later start to trip on
    monkeypatch.setattr(FullDisk, "full", False)  # room again: the next start makes the secret and keeps it
    again = StateStore(url, 10**9)
    assert again.secret() == again.secret() and again.working and listed(again) == ["browser-secret"]


def test_a_failed_write_leaves_no_partial_file(monkeypatch, caplog):
    store = StateStore(f"fulldisk://parts-{new_token()[:8]}", 10**9)
    store.secret()
    monkeypatch.setattr(FullDisk, "full", True)  # the disk fills up while the server runs
    store.writer.submit(new_token(), encoded(1))
    assert store.writer.flush()
    assert not store.working and "No space left" in caplog.text
    assert listed(store) == ["browser-secret"]  # the archive's partial file went with the failure


def test_stale_partial_files_are_swept_when_a_server_opens_the_store(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    stale, fresh = root / f"{'a' * 64}.1234abcd.part", root / f"{'b' * 64}.5678ef01.part"
    for part in (stale, fresh):
        part.write_bytes(b"x" * 1000)
    hours_ago = time.time() - 2 * store_module.STALE_PART_S
    os.utime(stale, (hours_ago, hours_ago))
    StateStore(str(root), 10**9)
    assert not stale.exists() and fresh.exists()  # another server may be writing the fresh one now


def test_a_damaged_entry_is_put_aside_counted_in_the_budget_and_goes_first(tmp_path):
    probe = StateStore(str(tmp_path / "probe"), budget_bytes=10**9)
    probe.writer.submit(new_token(), encoded(0))
    probe.writer.flush()
    size = probe.used_bytes()
    store = StateStore(str(tmp_path / "store"), budget_bytes=int(2.5 * size))  # room for two
    damaged, kept, newest = (new_token() for _ in range(3))
    for seed, token in enumerate((damaged, kept)):
        store.writer.submit(token, encoded(seed))
        assert store.writer.flush()
    store.put_aside(damaged)
    name = hashlib.sha256(damaged.encode()).hexdigest()
    assert (tmp_path / "store" / f"{name}.damaged").exists() and store.fetch(damaged, tmp_path) is None
    assert store.used_bytes() == 2 * size and not store.evicted(damaged)  # it still counts: no disk filled by it
    store.put_aside(damaged)  # a second server finding it gone: nothing happens
    time.sleep(0.02)
    store.writer.submit(newest, encoded(2))
    assert store.writer.flush()
    assert not (tmp_path / "store" / f"{name}.damaged").exists()  # the damaged entry went first, not a model
    assert all(store.fetch(t, tmp_path) is not None for t in (kept, newest)) and not store.evicted(damaged)
