"""The state store: each browser's model outlives the server process (a restart, a crash, a Space
that slept), in a local folder or any `fsspec` URL several servers share.

    store = open_store(url, budget_bytes)        # None when off ("off") or unusable (logged)
    token = store.tokens.new()                   # server-made and signed; the browser keeps it (BrowserState)
    token = store.tokens.verified(value)         # what a browser sent back: the token, or None
    store.writer.submit(token, kept)             # a playground.kept.Kept: written in the background
    path = store.fetch(token, into=folder)       # the latest archive, or None
    code = store.carry_code(token)               # a short code another browser pastes to take the model
    token = store.redeem(code)                   # ... and what it gives that browser: the token, or None
    store.use_up(code)                           # once it has taken the model

What a browser sends back is untrusted. BrowserState's secret cannot vouch for it: that secret is sent
to every browser, so anyone can write a value this app would decrypt. A token is therefore a random id
and an HMAC of it under a key that never leaves the server (`Tokens`; the store's `token-key`, shared by
the servers on one store), compared in constant time: a value someone planted in a browser's storage (a
shared workshop PC) is refused unless the server made it. The entry is named by a hash of the token, so
no byte of a request becomes part of a path and a token opens only its own entry; a name reveals
nothing of the token that writes or reads it.

A continue-elsewhere code carries a model to a browser that cannot read this one's storage (another
address of the server, another laptop). It is a bearer secret, like the token it stands for: 12 random
characters (60 bits) and 4 of an HMAC under the same key, in Crockford's base32 (no I, L, O or U to
misread), read with dashes and spaces ignored. A code that fails its MAC is refused before the store is
touched; one that passes names a small file (by a hash, again) holding the token. It works once, within
`CODE_TTL_S`, and the store holds at most `MAX_CODES` (the oldest go first), so codes cannot fill a disk.

Bounded: after each write the least recently written entries go until the store holds at most
`budget_bytes`; an entry evicted so leaves a small tombstone, so its owner is told why the model is
gone. Writes never block training: the writer keeps the latest archive per token and writes one at
a time in its own thread. A store that cannot be written (a full disk, no permission) is switched
off with one logged warning: the app goes on with models in memory only, and says so on the page.
A write that fails leaves no partial file behind, and partial files older than `STALE_PART_S` (a crash's)
are swept when a server opens the store.

Damage never stops a server: a secret file that is empty or not one this app makes (a disk that filled up
as it was written, a person's edit) is replaced by a new one, made as the first was (`_shared_secret`),
with one warning; an entry that cannot be read is put aside (`put_aside`: renamed `<entry>.damaged` for
the operator, counted in the budget and the first to go).

Tested backends: a local folder and fsspec's in-memory filesystem (`memory://`, as a stand-in for a
shared one: two apps in one process share it). Any fsspec URL with atomic moves should work.
Never imports a tab or gradio.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import logging
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import fsspec

from playground.kept import Kept

log = logging.getLogger("playground")
SECRET = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32): the form of the store's secrets
TOKEN_ID_BYTES = MAC_BYTES = 16  # a token: a random id and its HMAC, 128 bits each, URL-safe base64 ...
MAC_CHARS = 22  # ... of 22 characters each
TOKEN = re.compile(r"[A-Za-z0-9_-]{44}")
ARCHIVE, TOMBSTONE, DAMAGED, PART = ".zip", ".evicted", ".damaged", ".part"
SECRET_FILE = "browser-secret"  # BrowserState's key: the same on every server sharing the store
KEY_FILE = "token-key"  # signs tokens and codes; never leaves the servers
SECRET_WAIT_S = 5.0  # how long a secret another server is writing may take to be whole; past it, it is damaged
STALE_PART_S = 3600.0  # a partial file this old is no write in progress (a model at the cap takes seconds)
CODE_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32
CODE_ID_CHARS, CODE_MAC_CHARS = 12, 4  # 60 random bits, 20 of MAC: 16 characters, read in groups of 4
CODE_FILE = ".code"
CODE_TTL_S = 24 * 3600.0
MAX_CODES = 10_000
MISREAD = str.maketrans({"O": "0", "I": "1", "L": "1"})  # what a person may type for 0 and 1


class Tokens:
    """Session tokens signed with one key: a random id and its HMAC, both URL-safe (44 characters)."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    @classmethod
    def of_this_process(cls) -> "Tokens":
        """Tokens with a key of this process alone (no store to share one): a restart forgets them."""
        return cls(secrets.token_bytes(32))

    def new(self) -> str:
        """A fresh, unguessable token that holders of this key can verify."""
        token_id = _b64(secrets.token_bytes(TOKEN_ID_BYTES))
        return token_id + self._mac(token_id)

    def verified(self, value: object) -> str | None:
        """`value` if it is a token made with this key, else None (anything a browser sent)."""
        if not isinstance(value, str) or not TOKEN.fullmatch(value):
            return None
        token_id, mac = value[:-MAC_CHARS], value[-MAC_CHARS:]
        return value if hmac.compare_digest(self._mac(token_id), mac) else None

    def _mac(self, token_id: str) -> str:
        return _b64(hmac.new(self.key, f"token:{token_id}".encode("ascii"), hashlib.sha256).digest()[:MAC_BYTES])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _entry(token: str) -> str:
    """The entry's name: a hash of the token, so no client byte reaches a path."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def open_store(url: str, budget_bytes: int) -> "StateStore | None":
    """The store at `url`; None when `url` is "off" or the store cannot be opened (logged once: the app
    then keeps models in memory only)."""
    if url == "off":
        return None
    try:
        return StateStore(url, budget_bytes)
    except Exception as error:
        log.warning("state store %r cannot be opened (%s: %s); models are kept in memory only", url,
                    type(error).__name__, error)
        return None


class StateStore:
    """Archives by token under one root of an fsspec filesystem, within a byte budget."""

    def __init__(self, url: str, budget_bytes: int) -> None:
        self.fs, root = fsspec.core.url_to_fs(url)
        self.root = root.rstrip("/")
        self.budget_bytes = budget_bytes
        self.problem: str | None = None  # why the store is off, once a write failed
        self.fs.makedirs(self.root, exist_ok=True)
        self.tokens = Tokens(self._shared_secret(KEY_FILE).encode("ascii"))
        self._lock = threading.Lock()  # one eviction at a time
        self._sweep_parts()
        self.writer = Writer(self)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    @property
    def working(self) -> bool:
        return self.problem is None

    def carry_code(self, token: str) -> str:
        """A fresh continue-elsewhere code for `token` (a verified one), e.g. "7K2M-Q9XD-4HTW-P0CN"."""
        code_id = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_ID_CHARS))
        self._put_bytes(self._code_path(code_id), token.encode("ascii"))
        self._keep_codes()
        code = code_id + self._code_mac(code_id)
        return "-".join(code[at:at + 4] for at in range(0, len(code), 4))

    def redeem(self, code: object) -> str | None:
        """The token a code made by `carry_code` stands for; None for anything else (a typo, a code of another
        store, one used up or older than CODE_TTL_S)."""
        code_id = self._code_id(code)
        if code_id is None:
            return None
        try:
            info = self.fs.info(self._code_path(code_id))
            token = self.fs.cat_file(self._code_path(code_id))[:64].decode("ascii", "replace")
        except FileNotFoundError:
            return None
        return self.tokens.verified(token) if time.time() - _written(info) < CODE_TTL_S else None

    def use_up(self, code: str) -> None:
        """A redeemed code works once: whoever sees it later takes nothing."""
        code_id = self._code_id(code)
        if code_id is not None and self.fs.exists(self._code_path(code_id)):
            self.fs.rm(self._code_path(code_id))

    def _code_id(self, code: object) -> str | None:
        """The random part of a code as a person may type it (any case, dashes, spaces, O for 0), if its MAC
        holds; None otherwise, before the store is touched."""
        if not isinstance(code, str) or len(code) > 64:
            return None
        code = code.upper().replace("-", "").replace(" ", "").translate(MISREAD)
        if len(code) != CODE_ID_CHARS + CODE_MAC_CHARS or not set(code) <= set(CODE_ALPHABET):
            return None
        code_id, mac = code[:CODE_ID_CHARS], code[CODE_ID_CHARS:]
        return code_id if hmac.compare_digest(self._code_mac(code_id), mac) else None

    def _code_path(self, code_id: str) -> str:
        return self._path(hashlib.sha256(f"code:{code_id}".encode("ascii")).hexdigest() + CODE_FILE)

    def _code_mac(self, code_id: str) -> str:
        digest = hmac.new(self.tokens.key, f"carry:{code_id}".encode("ascii"), hashlib.sha256).digest()
        bits = int.from_bytes(digest[:4], "big") >> (32 - 5 * CODE_MAC_CHARS)
        return "".join(CODE_ALPHABET[(bits >> 5 * at) & 31] for at in reversed(range(CODE_MAC_CHARS)))

    def _keep_codes(self) -> None:
        """Drop codes past their time, then the oldest past MAX_CODES."""
        with self._lock:
            codes = sorted((info for info in self.fs.ls(self.root, detail=True) if info["name"].endswith(CODE_FILE)),
                           key=_written)
            now = time.time()
            for at, info in enumerate(codes):
                if len(codes) - at > MAX_CODES or now - _written(info) >= CODE_TTL_S:
                    self.fs.rm(info["name"])

    def secret(self) -> str:
        """The BrowserState secret, kept in the store so a restart can read old tokens (`_shared_secret`)."""
        return self._shared_secret(SECRET_FILE)

    def _shared_secret(self, name: str) -> str:
        """A secret kept in the store as `name`: made once, the same for every server sharing the store.
        Servers that start together agree: each version of the file is created exclusively, so the first
        one's secret stands and the others read it (on a backend without exclusive creation, start one server
        alone the first time). A damaged version (empty, or not in the form `secrets.token_urlsafe(32)` makes) is replaced by
        the next, `name.1`, `name.2`, ..., made the same way, with one warning: whatever it kept (old tokens)
        is lost. Never raises: when no version can be written the store is switched off and the secret is
        this process's own."""
        version = self._latest_version(name)
        while True:
            path = self._path(name if version == 0 else f"{name}.{version}")
            try:
                secret = self._read_or_create(path)
            except OSError as error:  # a full disk, no permission
                self._switch_off(f"{name} cannot be written ({type(error).__name__}: {error})")
                return secrets.token_urlsafe(32)
            if secret is not None:
                return secret
            log.warning("state store: %s is damaged (empty, or not a secret this app makes); a new one replaces it, "
                        "and what the old one kept is lost", path)
            version += 1

    def _latest_version(self, name: str) -> int:
        """The newest version of the secret file `name` in the store (0: the file itself, or none yet)."""
        pattern = re.compile(re.escape(name) + r"(?:\.([0-9]{1,9}))?")
        found = (pattern.fullmatch(info["name"].rsplit("/", 1)[-1]) for info in self.fs.ls(self.root, detail=True))
        return max((int(match.group(1) or 0) for match in found if match), default=0)

    def _read_or_create(self, path: str) -> str | None:
        """The secret at `path`, made here if there is none (exclusively); None if it is damaged."""
        made = secrets.token_urlsafe(32)
        try:
            with self.fs.open(path, "xb") as file:
                file.write(made.encode("ascii"))
            return made
        except FileExistsError:
            pass
        except (NotImplementedError, ValueError):  # no exclusive creation here
            if not self.fs.exists(path):
                self._put_bytes(path, made.encode("ascii"))
        except OSError:  # made, but not written (a full disk): gone again, so that no later start finds it damaged
            with contextlib.suppress(OSError):
                self.fs.rm(path)
            raise
        deadline = time.monotonic() + SECRET_WAIT_S
        while True:  # another server may be writing it at this moment
            try:
                secret = self.fs.cat_file(path).decode("ascii", "replace").strip()
            except FileNotFoundError:  # its maker could not write it: the next version
                return None
            if SECRET.fullmatch(secret):
                return secret
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _switch_off(self, problem: str) -> None:
        """Models in memory only from now on: said once in the log, and on the page (`working`)."""
        if self.problem is None:
            log.warning("state store: %s; models are kept in memory only from now on", problem)
        self.problem = self.problem or problem

    def _put_bytes(self, path: str, data: bytes) -> None:
        """Write then move into place: a reader never sees half a file."""
        with self._partial(path) as part:
            self.fs.pipe_file(part, data)
            self.fs.mv(part, path)

    @contextlib.contextmanager
    def _partial(self, path: str) -> Iterator[str]:
        """A partial file's name to write `path` through; removed if the write fails (a full disk stays
        no fuller)."""
        part = f"{path}.{secrets.token_hex(4)}{PART}"
        try:
            yield part
        except BaseException:
            with contextlib.suppress(OSError):
                if self.fs.exists(part):
                    self.fs.rm(part)
            raise

    def _sweep_parts(self) -> None:
        """Remove partial files no write is making any more (a crash's, a full disk's under an older version)."""
        now = time.time()
        for info in self.fs.ls(self.root, detail=True):
            if info["name"].endswith(PART) and now - _written(info) > STALE_PART_S:
                with contextlib.suppress(OSError):
                    self.fs.rm(info["name"])
                    log.info("state store: removed a stale partial file of %d bytes", info["size"])

    def put(self, token: str, archive: Path) -> None:
        """Store `archive` as the token's entry (replacing the last), then keep to the budget."""
        name = _entry(token)
        with self._partial(self._path(name + ARCHIVE)) as part:
            self.fs.put_file(str(archive), part)
            self.fs.mv(part, self._path(name + ARCHIVE))
        if self.fs.exists(self._path(name + TOMBSTONE)):  # back within the budget: no longer evicted
            self.fs.rm(self._path(name + TOMBSTONE))
        self._keep_to_budget(keep=name + ARCHIVE)

    def fetch(self, token: str, into: Path) -> Path | None:
        """The token's latest archive copied to the folder `into`, or None if there is none."""
        path = self._path(_entry(token) + ARCHIVE)
        if not self.fs.exists(path):
            return None
        local = into / "restored.zip"
        self.fs.get_file(path, str(local))
        return local

    def put_aside(self, token: str) -> None:
        """The token's entry could not be read: keep it aside for the operator (`<entry>.damaged`, replacing an
        older one of the same entry), no longer the token's; it counts in the budget and goes first."""
        name = _entry(token)
        with contextlib.suppress(FileNotFoundError):  # another server put it aside first
            self.fs.mv(self._path(name + ARCHIVE), self._path(name + DAMAGED))

    def evicted(self, token: str) -> bool:
        """Whether the token's model was removed to keep to the budget."""
        return self.fs.exists(self._path(_entry(token) + TOMBSTONE))

    def used_bytes(self) -> int:
        """What counts in the budget: the archives, and the damaged entries put aside."""
        return sum(info["size"] for info in self._held())

    def _held(self) -> list[dict]:
        return [info for info in self.fs.ls(self.root, detail=True) if info["name"].endswith((ARCHIVE, DAMAGED))]

    def _keep_to_budget(self, keep: str) -> None:
        """Past the budget, remove the damaged entries, then the least recently written archives (never
        `keep`, just written); an archive leaves a tombstone."""
        with self._lock:
            entries = sorted(self._held(), key=lambda info: (info["name"].endswith(ARCHIVE), _written(info)))
            used = sum(info["size"] for info in entries)
            for info in entries:
                if used <= self.budget_bytes:
                    break
                if info["name"].endswith(keep):
                    continue
                self.fs.rm(info["name"])
                if info["name"].endswith(ARCHIVE):
                    self.fs.pipe_file(info["name"][: -len(ARCHIVE)] + TOMBSTONE, b"")
                used -= info["size"]
                log.info("state store: removed %s of %d bytes to keep to %d", info["name"].rsplit("/", 1)[-1],
                         info["size"], self.budget_bytes)


def _written(info: dict) -> float:
    """When an entry was written, as backends name it (local: mtime; memory: created)."""
    stamp = info.get("mtime", info.get("created", 0.0))
    return stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp)


class Writer:
    """One background thread writing each token's latest archive; a newer one replaces a waiting one."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._waiting: dict[str, Kept] = {}
        self._busy = 0  # archives being written now
        self._changed = threading.Condition()
        threading.Thread(target=self._loop, name="state-store-writer", daemon=True).start()

    def submit(self, token: str, kept: Kept) -> None:
        """Write `kept` as the token's entry soon; returns at once."""
        if not self.store.working:
            return
        with self._changed:
            self._waiting[token] = kept
            self._changed.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted is written (tests, shutdown); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._waiting and not self._busy, timeout)

    def _loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._waiting)
                token = next(iter(self._waiting))
                kept = self._waiting.pop(token)
                self._busy += 1
            try:
                with tempfile.TemporaryDirectory(prefix="state-store-") as folder:
                    # uncompressed: deflating a default model's 0.7 MB costs 90 ms of a core, at every evaluation
                    # of every learner in the room; storing it, under 1 ms
                    self.store.put(token, kept.write_archive(Path(folder) / "state.zip", compress=False))
            except Exception as error:  # a full disk, no permission: memory only from now on, said once
                self.store._switch_off(f"writing failed ({type(error).__name__}: {error})")
                with self._changed:
                    self._waiting.clear()
            finally:
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()
