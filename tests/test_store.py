"""The state store (issues 24, 36): tokens the server makes and signs are the only keys, no byte of a client's value
reaches a path, the budget holds with least-recently-written eviction and tombstones, two apps share
one store, and a store that cannot be written switches itself off without losing anything in memory."""

import os
import secrets
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
from playground.store import StateStore, open_store


def encoded(seed: int = 0, n_embd: int = 16):
    tokenizer = CharTokenizer("abc|\n")
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, n_embd=n_embd, block_size=8),
                generator=torch.Generator().manual_seed(seed))
    return encode(model, tokenizer, {"steps": seed})


def test_only_tokens_the_server_makes_are_taken(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.new_token()
    assert store.verified(token) == token and len(token) == 44 and store.new_token() != token
    for forged in (None, "", 7, ["x" * 44], "../" * 15, "a" * 43, "a" * 44, "a" * 45, "a" * (1 << 20),
                   "A" * 43 + "/", "A" * 43 + ".", "A" * 43 + "\x00", token + "\n", token[:-1],
                   secrets.token_urlsafe(32) + "A"):  # the right form, no valid MAC: planted, not made here
        assert store.verified(forged) is None, repr(forged)[:60]


def test_a_token_is_refused_if_one_character_changes_or_the_key_differs(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.new_token()
    for at in (0, 21, 22, 43):  # in the id and in the MAC
        changed = token[:at] + ("A" if token[at] != "A" else "B") + token[at + 1:]
        assert store.verified(changed) is None
    other = StateStore(str(tmp_path / "other"), budget_bytes=10**9)  # another store: another key
    assert other.verified(token) is None and other.verified(other.new_token()) is not None
    again = StateStore(str(tmp_path / "store"), budget_bytes=10**9)  # a restart: the same key from the store
    assert again.verified(token) == token
    assert (tmp_path / "store" / "token-key").read_text() not in (store.secret(), token)  # not sent to browsers


def test_an_entry_is_named_by_a_hash_and_holds_the_latest_archive(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.new_token()
    assert store.fetch(token, tmp_path) is None and not store.evicted(token)
    first, second = encoded(1), encoded(2)
    store.writer.submit(token, first)
    store.writer.submit(token, second)  # a newer state replaces one still waiting, or the written one
    assert store.writer.flush()
    names = sorted(os.listdir(tmp_path / "store"))
    assert token not in "".join(names) and all(n in ("browser-secret", "token-key") or n[:64].isalnum() for n in names)
    fetched = store.fetch(token, tmp_path)
    assert fetched is not None
    with zipfile.ZipFile(fetched) as archive:
        assert archive.read("model.safetensors") == second.weights
    assert store.fetch(store.new_token(), tmp_path) is None  # another token opens nothing


def test_the_budget_evicts_the_least_recently_written_and_leaves_a_tombstone(tmp_path):
    probe = StateStore(str(tmp_path / "probe"), budget_bytes=10**9)
    probe.writer.submit(probe.new_token(), encoded(0))
    probe.writer.flush()
    size = probe.used_bytes()
    store = StateStore(str(tmp_path / "store"), budget_bytes=int(2.5 * size))  # room for two
    tokens = [store.new_token() for _ in range(3)]
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
    url = f"memory://shared-{secrets.token_hex(4)}"
    one, other = StateStore(url, 10**9), StateStore(url, 10**9)
    assert one.secret() == other.secret() and len(one.secret()) >= 32
    token = one.new_token()
    assert other.verified(token) == token  # one key for both
    one.writer.submit(token, encoded(3))
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
    assert len({store.key for store in stores}) == 1
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
    store.writer.submit(store.new_token(), encoded(4))
    assert store.writer.flush()
    assert not store.working and "memory only" in caplog.text
    store.writer.submit(store.new_token(), encoded(5))  # ignored, quietly: the app already says so
    assert store.writer.flush(timeout=1)


@pytest.mark.parametrize("hostile", ["../../etc/passwd", "/" * 43, "." * 43])
def test_path_shaped_values_never_reach_the_filesystem(tmp_path, hostile):
    store = StateStore(str(tmp_path / "store"), 10**9)
    assert store.verified(hostile) is None
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert store.fetch(store.verified(hostile) or store.new_token(), tmp_path) is None
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


# ---------------------------------------------------------------- continue-elsewhere codes


def test_a_code_gives_its_token_once_however_a_person_types_it(tmp_path):
    store = StateStore(str(tmp_path / "store"), budget_bytes=10**9)
    token = store.new_token()
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
    code = store.carry_code(store.new_token())
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
    token = store.new_token()
    old = store.carry_code(token)
    [path] = (tmp_path / "store").glob("*.code")
    day_ago = time.time() - 24 * 3600 - 1
    os.utime(path, (day_ago, day_ago))
    assert store.redeem(old) is None  # too old
    monkeypatch.setattr("playground.store.MAX_CODES", 3)
    codes = [store.carry_code(token) for _ in range(5)]
    assert len(list((tmp_path / "store").glob("*.code"))) == 3  # the expired one and the oldest went
    assert [store.redeem(code) for code in codes[-3:]] == [token] * 3
