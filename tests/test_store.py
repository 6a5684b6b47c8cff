"""The state store (issues 24, 36): tokens the server makes and signs are the only keys, no byte of a client's value
reaches a path, the budget holds with least-recently-written eviction and tombstones, two apps share
one store, and a store that cannot be written switches itself off without losing anything in memory."""

import errno
import hashlib
import logging
import os
import secrets
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
from playground.kept import Kept
from playground.store import StateStore, open_store


def kept_state(seed: int = 0, n_embd: int = 16) -> Kept:
    tokenizer = CharTokenizer("abc|\n")
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, n_embd=n_embd, block_size=8),
                generator=torch.Generator().manual_seed(seed))
    return Kept(encode(model, tokenizer, {"steps": seed}))


def test_only_tokens_the_server_makes_are_taken(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.tokens.new()
    assert store.tokens.verified(token) == token and len(token) == 44 and store.tokens.new() != token
    for forged in (None, "", 7, ["x" * 44], "../" * 15, "a" * 43, "a" * 44, "a" * 45, "a" * (1 << 20),
                   "A" * 43 + "/", "A" * 43 + ".", "A" * 43 + "\x00", token + "\n", token[:-1],
                   secrets.token_urlsafe(32) + "A"):  # the right form, no valid MAC: planted, not made here
        assert store.tokens.verified(forged) is None, repr(forged)[:60]


def test_a_token_is_refused_if_one_character_changes_or_the_key_differs(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.tokens.new()
    for at in (0, 21, 22, 43):  # in the id and in the MAC
        changed = token[:at] + ("A" if token[at] != "A" else "B") + token[at + 1:]
        assert store.tokens.verified(changed) is None
    other = StateStore(str(tmp_path / "other"), budget_bytes=10**9)  # another store: another key
    assert other.tokens.verified(token) is None and other.tokens.verified(other.tokens.new()) is not None
    again = StateStore(str(tmp_path / "store"), budget_bytes=10**9)  # a restart: the same key from the store
    assert again.tokens.verified(token) == token
    assert (tmp_path / "store" / "token-key").read_text() not in (store.secret(), token)  # not sent to browsers


def test_an_entry_is_named_by_a_hash_and_holds_the_latest_archive(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.tokens.new()
    assert store.fetch(token, tmp_path) is None and not store.evicted(token)
    first, second = kept_state(1), kept_state(2)
    store.writer.submit(token, first)
    store.writer.submit(token, second)  # a newer state replaces one still waiting, or the written one
    assert store.writer.flush()
    names = sorted(os.listdir(tmp_path / "store"))
    assert token not in "".join(names) and all(n in ("browser-secret", "token-key") or n[:64].isalnum() for n in names)
    fetched = store.fetch(token, tmp_path)
    assert fetched is not None
    with zipfile.ZipFile(fetched) as archive:
        assert archive.read("model.safetensors") == second.checkpoint.weights
    assert store.fetch(store.tokens.new(), tmp_path) is None  # another token opens nothing


def room_for_two(tmp_path: Path) -> tuple[StateStore, int]:
    """A store whose budget holds two of `kept_state`'s archives, and one archive's size on the disk."""
    probe = StateStore(str(tmp_path / "probe"), budget_bytes=10**9)
    probe.writer.submit(probe.tokens.new(), kept_state(0))
    probe.writer.flush()
    size = probe.used_bytes()
    return StateStore(str(tmp_path / "store"), budget_bytes=int(2.5 * size)), size


def test_the_budget_evicts_the_least_recently_written_and_leaves_a_tombstone(tmp_path):
    store, _ = room_for_two(tmp_path)
    tokens = [store.tokens.new() for _ in range(3)]
    for seed, token in enumerate(tokens):
        store.writer.submit(token, kept_state(seed))
        assert store.writer.flush()
        time.sleep(0.02)  # distinct modification times
    assert store.used_bytes() <= store.budget_bytes
    assert store.fetch(tokens[0], tmp_path) is None and store.evicted(tokens[0])
    assert all(store.fetch(t, tmp_path) is not None and not store.evicted(t) for t in tokens[1:])
    store.writer.submit(tokens[0], kept_state(0))  # it comes back: no longer evicted; the next oldest goes
    assert store.writer.flush()
    assert not store.evicted(tokens[0]) and store.evicted(tokens[1])


def test_two_apps_share_one_store_and_its_secret():
    url = f"memory://shared-{secrets.token_hex(4)}"
    one, other = StateStore(url, 10**9), StateStore(url, 10**9)
    assert one.secret() == other.secret() and len(one.secret()) >= 32
    token = one.tokens.new()
    assert other.tokens.verified(token) == token  # one key for both
    one.writer.submit(token, kept_state(3))
    assert one.writer.flush()
    assert other.fetch(token, Path(os.environ.get("TMPDIR", "/tmp"))) is not None


@pytest.mark.parametrize("url", ["memory://", "folder"])
def test_servers_starting_together_on_an_empty_store_agree_on_its_secrets(url, tmp_path):
    url = f"memory://race-{secrets.token_hex(4)}" if url == "memory://" else str(tmp_path / "store")
    start = threading.Barrier(8)

    def opened(_) -> StateStore:
        start.wait()
        return StateStore(url, 10**9)  # makes or reads the token key

    with ThreadPoolExecutor(8) as pool:
        stores = list(pool.map(opened, range(8)))
    assert len({store.tokens.key for store in stores}) == 1
    start.reset()

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
    store.writer.submit(store.tokens.new(), kept_state(4))
    assert store.writer.flush()
    assert not store.working and "memory only" in caplog.text
    store.writer.submit(store.tokens.new(), kept_state(5))  # ignored, quietly: the app already says so
    assert store.writer.flush(timeout=1)


@pytest.mark.parametrize("hostile", ["../../etc/passwd", "/" * 43, "." * 43])
def test_path_shaped_values_never_reach_the_filesystem(tmp_path, hostile):
    store = StateStore(str(tmp_path / "store"), 10**9)
    assert store.tokens.verified(hostile) is None
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert store.fetch(store.tokens.verified(hostile) or store.tokens.new(), tmp_path) is None
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
    return f"memory://race-{secrets.token_hex(4)}" if kind == "memory://" else str(tmp_path / "store")


DAMAGED_SECRETS = {"empty": b"", "garbage": b"\xff\xfe not a secret \x00\n", "short": b"A" * 42}


SECRETS = {"browser-secret": StateStore.secret, "token-key": lambda store: store.tokens.key.decode()}


@pytest.mark.parametrize("name", SECRETS)
@pytest.mark.parametrize("damage", DAMAGED_SECRETS)
@pytest.mark.parametrize("kind", ["memory://", "folder"])
def test_servers_starting_together_on_a_damaged_secret_agree_on_its_replacement(kind, damage, name, tmp_path,
                                                                                monkeypatch, caplog):
    monkeypatch.setattr(store_module, "SECRET_WAIT_S", 0.3)  # past this, a secret nobody is writing is damaged
    url = store_url(kind, tmp_path)
    first = StateStore(url, 10**9)
    first.secret()
    first.fs.pipe_file(first._path(name), DAMAGED_SECRETS[damage])
    start = threading.Barrier(8)

    def secret(_) -> str:
        start.wait()
        return SECRETS[name](StateStore(url, 10**9))  # a server starting: it reads the key, then the secret

    with caplog.at_level(logging.WARNING, logger="playground"), ThreadPoolExecutor(8) as pool:
        made = set(pool.map(secret, range(8)))
    assert len(made) == 1 and store_module.SECRET.fullmatch(next(iter(made)))
    assert caplog.text.count(f"{name} is damaged") == 8  # one warning per server
    assert first.fs.cat_file(first._path(f"{name}.1")).decode() in made  # the replacement, kept
    assert listed(first) == sorted(["browser-secret", "token-key", f"{name}.1"])  # the damaged one stays too
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="playground"):
        later = StateStore(url, 10**9)
        assert SECRETS[name](later) in made  # a later start reads it, quietly
    assert "damaged" not in caplog.text and later.working


def test_a_first_start_on_a_full_disk_leaves_no_empty_secret_and_serves_from_memory(monkeypatch, caplog):
    url = f"fulldisk://full-{secrets.token_hex(4)}"
    monkeypatch.setattr(FullDisk, "full", True)
    store = StateStore(url, 10**9)
    assert store_module.SECRET.fullmatch(store.secret())  # this process's own: the page can still keep a token
    assert not store.working and "token-key cannot be written" in caplog.text
    assert caplog.text.count("memory only") == 1  # said once, though the secret failed too
    assert listed(store) == []  # no 0-byte secret for every later start to trip on
    monkeypatch.setattr(FullDisk, "full", False)  # room again: the next start makes the secret and keeps it
    again = StateStore(url, 10**9)
    assert again.secret() == again.secret() and again.working and listed(again) == ["browser-secret", "token-key"]


def test_a_failed_write_leaves_no_partial_file(monkeypatch, caplog):
    store = StateStore(f"fulldisk://parts-{secrets.token_hex(4)}", 10**9)
    store.secret()
    monkeypatch.setattr(FullDisk, "full", True)  # the disk fills up while the server runs
    store.writer.submit(store.tokens.new(), kept_state(1))
    assert store.writer.flush()
    assert not store.working and "No space left" in caplog.text
    assert listed(store) == ["browser-secret", "token-key"]  # the archive's partial file went with the failure


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
    store, size = room_for_two(tmp_path)
    damaged, kept, newest = (store.tokens.new() for _ in range(3))
    for seed, token in enumerate((damaged, kept)):
        store.writer.submit(token, kept_state(seed))
        assert store.writer.flush()
    store.put_aside(damaged)
    name = hashlib.sha256(damaged.encode()).hexdigest()
    assert (tmp_path / "store" / f"{name}.damaged").exists() and store.fetch(damaged, tmp_path) is None
    assert store.used_bytes() == 2 * size and not store.evicted(damaged)  # it still counts: no disk filled by it
    store.put_aside(damaged)  # a second server finding it gone: nothing happens
    time.sleep(0.02)
    store.writer.submit(newest, kept_state(2))
    assert store.writer.flush()
    assert not (tmp_path / "store" / f"{name}.damaged").exists()  # the damaged entry went first, not a model
    assert all(store.fetch(t, tmp_path) is not None for t in (kept, newest)) and not store.evicted(damaged)


# ---------------------------------------------------------------- continue-elsewhere codes


def test_a_code_gives_its_token_once_however_a_person_types_it(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.tokens.new()
    code = store.carry_code(token)
    assert len(code) == 19 and code.count("-") == 3 and token not in code
    typed = code.lower().replace("-", " ").replace("0", "o").replace("1", "l")  # as read aloud, or from a board
    assert store.redeem(typed) == token and store.redeem(code) == token  # readable until used up
    store.use_up(typed)
    assert store.redeem(code) is None  # once
    other = StateStore(str(tmp_path / "other"), budget_bytes=10**9)
    assert other.redeem(store.carry_code(token)) is None  # another store's key


def test_a_code_with_one_character_changed_is_refused_before_the_store_is_read(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    code = store.carry_code(store.tokens.new())
    reads = []
    original = store.fs.cat_file
    store.fs.cat_file = lambda *args, **kwargs: reads.append(args) or original(*args, **kwargs)
    for at in (0, 5, 13, 18):  # in the random part and in the MAC
        changed = code[:at] + ("2" if code[at] != "2" else "3") + code[at + 1:]
        assert store.redeem(changed) is None
    for hostile in (None, 7, "", "../" * 6, "A" * 16, "A" * 10_000, code + "X", "ÄÖÜ" * 6, code.replace("-", "/")):
        assert store.redeem(hostile) is None
    assert reads == []


def test_codes_expire_and_are_bounded_in_number(tmp_path, monkeypatch):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.tokens.new()
    old = store.carry_code(token)
    [path] = (tmp_path / "store").glob("*.code")
    day_ago = time.time() - 24 * 3600 - 1
    os.utime(path, (day_ago, day_ago))
    assert store.redeem(old) is None  # too old
    monkeypatch.setattr("playground.store.MAX_CODES", 3)
    codes = [store.carry_code(token) for _ in range(5)]
    assert len(list((tmp_path / "store").glob("*.code"))) == 3  # the expired one and the oldest went
    assert [store.redeem(code) for code in codes[-3:]] == [token] * 3
