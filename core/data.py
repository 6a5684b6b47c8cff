"""Corpora (Tiny Shakespeare, synthetic tasks, user text) and fast seeded batches.

Imports the tokenizers only. Never imports the model, the training loop, gradio, plotly or `playground`.
"""

from __future__ import annotations

import hashlib
import os
import random
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from core.tokenizers import CharTokenizer, GPT2Tokenizer, Tokenizer

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
DATA_DIR_ENV = "PLAYGROUND_DATA_DIR"  # a folder holding tinyshakespeare/input.txt

MAX_USER_TEXT_BYTES = 5_000_000
TRAIN_FRACTION = 0.9


class DataError(ValueError):
    """Corpus problems a user can fix; the message says how."""


# ---------------------------------------------------------------- Tiny Shakespeare


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attention-playground"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_checked(path: Path) -> str:
    data = path.read_bytes()
    if _sha256(data) != SHAKESPEARE_SHA256:
        raise DataError(
            f"{path} is not Tiny Shakespeare (its sha256 is {_sha256(data)}, expected {SHAKESPEARE_SHA256})"
        )
    return data.decode("utf-8")


def load_shakespeare(path: str | Path | None = None, *, download: bool = True) -> str:
    """Tiny Shakespeare's text, from (in order) `path`, $PLAYGROUND_DATA_DIR, the cache, or the web.

    Every source is checked against the known sha256; a download is cached for next time.
    """
    if path is not None:
        return _read_checked(Path(path))
    if os.environ.get(DATA_DIR_ENV):
        local = Path(os.environ[DATA_DIR_ENV]) / "tinyshakespeare" / "input.txt"
        if not local.is_file():
            raise DataError(f"${DATA_DIR_ENV} is set but {local} does not exist")
        return _read_checked(local)
    cached = cache_dir() / "tinyshakespeare" / "input.txt"
    if cached.is_file():
        return _read_checked(cached)
    how_to = (
        f"Download {SHAKESPEARE_URL} yourself and either pass its path, or put it at "
        f"FOLDER/tinyshakespeare/input.txt and set {DATA_DIR_ENV}=FOLDER, or copy it to {cached}."
    )
    if not download:
        raise DataError(f"Tiny Shakespeare is not cached yet. {how_to}")
    try:
        with urllib.request.urlopen(SHAKESPEARE_URL, timeout=20) as response:
            data = response.read()
    except OSError as error:
        reason = getattr(error, "reason", None) or error  # URLError's own text is "<urlopen error ...>"
        raise DataError(f"Could not download Tiny Shakespeare ({reason}). {how_to}") from None
    if _sha256(data) != SHAKESPEARE_SHA256:
        raise DataError(f"The downloaded Tiny Shakespeare has the wrong sha256. {how_to}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(cached)  # atomic: a crash never leaves a half-written cache
    return data.decode("utf-8")


# ---------------------------------------------------------------- synthetic corpora
# Each task's solution is a crisp attention pattern; its corpus is generated in well under a second.

LETTERS = "abcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"
# A task corpus ends every line with a line break, so each line a model trains on comes after one
# (`answer_mask` counts a line only then): the line break is how it finds where a question begins.
LINE_START = "\n"


@dataclass(frozen=True)
class Task:
    """A synthetic task. Each line is a question, `separator`, then `answer(question)`. A question is
    `shortest` to `longest` random characters of `alphabet` (with `distinct`, none twice), so a model
    cannot predict it: it can learn only the answer."""

    alphabet: str
    shortest: int
    longest: int
    separator: str
    answer: Callable[[str], str]
    unit: str  # what a character of the alphabet is called
    noun: str  # what a question is called
    distinct: bool = False

    def question(self, rng: random.Random) -> str:
        """A random question. (The draws are the ones the corpora were measured with: keep their order.)"""
        length = self.shortest if self.shortest == self.longest else rng.randint(self.shortest, self.longest)
        if self.distinct:
            return "".join(rng.sample(self.alphabet, length))
        return "".join(rng.choice(self.alphabet) for _ in range(length))

    def corpus(self, n_lines: int = 6000, seed: int = 0) -> str:
        """`n_lines` lines of the task, each ended by a line break."""
        rng = random.Random(seed)
        questions = (self.question(rng) for _ in range(n_lines))
        return "".join(f"{question}{self.separator}{self.answer(question)}{LINE_START}" for question in questions)

    def questions(self) -> str:
        """Its questions in words: '8-letter words (a–z)', 'words of 3 to 12 different letters (a–z)'."""
        if self.shortest == self.longest:
            size = f"{self.shortest}-{self.unit} {self.noun}"
        else:
            different = "different " if self.distinct else ""
            size = f"{self.noun} of {self.shortest} to {self.longest} {different}{self.unit}s"
        return f"{size} ({self.span})"

    @property
    def span(self) -> str:
        """The alphabet as a range, 'a–z' (each task's alphabet is a run of consecutive characters)."""
        return f"{self.alphabet[0]}–{self.alphabet[-1]}"

    def as_line(self, prompt: str) -> str:
        """`prompt` as a line of the task starts: after a line break, as every line the model trained on
        did. Without it the model has no mark of where the question begins (a copy's first letter comes
        out wrong)."""
        return prompt if prompt.startswith(LINE_START) else LINE_START + prompt

    def unlike_training(self, prompt: str) -> list[tuple[str, str]]:
        """(question, how it differs) for each question in `prompt` unlike every question the task trains
        on. A question is a line's text before its separator; the last line's, with no separator yet,
        may be unfinished, so only a question too long or of other characters is unlike there."""
        found = []
        lines = prompt.split(LINE_START)
        for number, line in enumerate(lines, start=1):
            question, separator, _ = line.partition(self.separator)
            unfinished = not separator and number == len(lines)
            difference = self._difference(question, unfinished) if line else None
            if difference:
                found.append((question, difference))
        return found

    def _difference(self, question: str, unfinished: bool) -> str | None:
        if set(question) - set(self.alphabet):
            return f"has characters other than the {self.unit}s {self.span}"
        length = len(question)
        if length > self.longest or (length < self.shortest and not unfinished):
            return f"has {length} {self.unit}{'' if length == 1 else 's'}"
        if self.distinct and len(set(question)) < length:
            return f"has a {self.unit} twice"
        return None


BABY_GPT_SEQUENCE = "111101111011110"


def binary_corpus(repeats: int = 400) -> str:
    """The baby GPT's sequence, repeated: a two-token corpus whose model is a Markov chain."""
    return BABY_GPT_SEQUENCE * repeats


@dataclass(frozen=True)
class CorpusInfo:
    title: str
    description: str
    needs_download: bool = False
    task: Task | None = None  # a synthetic task's lines, for its corpus (None: the corpus is not one)

    @property
    def answer_after(self) -> str | None:
        """A task line's question ends at this character; the rest of the line, its answer, follows from
        the question. The question itself is random, so the loss over whole lines has a floor."""
        return self.task.separator if self.task else None


CORPORA: dict[str, CorpusInfo] = {
    "shakespeare": CorpusInfo(
        "Tiny Shakespeare", "1.1M characters of Shakespeare's plays (downloaded once, 1.1 MB).", True
    ),
    # 'qwhzbkad|qwhzbkad': copying the second half means looking at the token after the earlier
    # occurrence of the current one (an induction head's move). Every word has the same length, so a
    # model learns it as a fixed offset instead: crisp to see, and the contrast to `induction`.
    "repeat": CorpusInfo("Copy task", "Random 8-letter words written twice: watch a copying head form.",
                         task=Task(LETTERS, 8, 8, "|", lambda word: word, "letter", "words")),
    # 'qwe|qwe', 'bdkzwaxfmo|bdkzwaxfmo': the letter to copy is a word's length back, which varies, so
    # no fixed offset finds it: the model must find the earlier occurrence of the current letter and
    # copy the one after it (an induction head). No letter appears twice in a word, so that earlier
    # occurrence is always unique.
    "induction": CorpusInfo("Copy task, words of 3 to 12 letters",
                            "Random words of 3 to 12 letters written twice: watch an induction head form.",
                            task=Task(LETTERS, 3, 12, "|", lambda word: word, "letter", "words", distinct=True)),
    # 'abcdefgh>hgfedcba': writing the reversal makes an anti-diagonal attention pattern.
    "reverse": CorpusInfo("Reverse task", "Random words then their reversal: an anti-diagonal pattern.",
                          task=Task(LETTERS, 8, 8, ">", lambda word: word[::-1], "letter", "words")),
    # '38152706=01235678': sorting digits makes heads that search for the next-larger digit.
    "sort": CorpusInfo("Sort task", "Random digits then the same digits sorted.",
                       task=Task(DIGITS, 8, 8, "=", lambda digits: "".join(sorted(digits)), "digit", "numbers")),
    "binary": CorpusInfo("Binary sequence", f"The baby GPT's sequence {BABY_GPT_SEQUENCE}, repeated."),
}


def corpus_text(name: str, shakespeare_path: str | Path | None = None) -> str:
    """The text of a built-in corpus by name (see `CORPORA`)."""
    if name == "shakespeare":
        return load_shakespeare(shakespeare_path)
    if name == "binary":
        return binary_corpus()
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; choose one of {list(CORPORA)}")
    return CORPORA[name].task.corpus()


# ---------------------------------------------------------------- user text


def check_user_text(text: str, *, min_chars: int, max_bytes: int = MAX_USER_TEXT_BYTES) -> str:
    """Pasted text, checked: non-empty, not too large, longer than the model's context."""
    if not isinstance(text, str) or not text.strip():
        raise DataError("The text is empty: paste some text or upload a .txt file.")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise DataError(f"The text is {size:,} bytes; the limit is {max_bytes:,} bytes.")
    if len(text) <= min_chars:
        raise DataError(
            f"The text has {len(text):,} characters; it must be longer than {min_chars:,} "
            "(the model's context plus a validation split)."
        )
    return text


def read_text_file(path: str | Path, *, min_chars: int, max_bytes: int = MAX_USER_TEXT_BYTES) -> str:
    """An uploaded .txt file, checked: size cap first (before reading it all), UTF-8, no binary."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise DataError(f"{path.name} is {size:,} bytes; the limit is {max_bytes:,} bytes.")
    data = path.read_bytes()
    if b"\x00" in data:
        raise DataError(f"{path.name} looks like a binary file, not text.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path.name} is not UTF-8 text (bad byte at position {error.start}); save it as UTF-8."
        ) from None
    return check_user_text(text, min_chars=min_chars, max_bytes=max_bytes)


# ---------------------------------------------------------------- tokens and batches


def default_tokenizer(kind: str, text: str) -> Tokenizer:
    """'char' builds a character vocabulary from `text`; 'gpt2' is GPT-2's BPE."""
    if kind == "char":
        return CharTokenizer.from_text(text)
    if kind == "gpt2":
        return GPT2Tokenizer()
    raise DataError(f"unknown tokenizer {kind!r}; choose 'char' or 'gpt2'")


@dataclass
class TokenData:
    """A corpus as token ids, split 90/10 into training and validation."""

    train: torch.Tensor  # (N_train,) int64
    val: torch.Tensor  # (N_val,) int64
    # A task corpus's separator and newline ids (see CorpusInfo.answer_after): with them a window's
    # answer targets can be found (`answer_mask`). None for other text.
    answer_tokens: tuple[int, int] | None = None

    @classmethod
    def from_text(cls, text: str, tokenizer: Tokenizer, block_size: int,
                  answer_after: str | None = None) -> "TokenData":
        """The text's tokens, split; with `answer_after` (a task's separator, see CorpusInfo) it also
        keeps the separator's and the newline's ids, if both are single tokens of this tokenizer."""
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
        n_train = int(TRAIN_FRACTION * len(ids))
        data = cls(ids[:n_train], ids[n_train:])
        if answer_after is not None:
            separator, newline = tokenizer.encode(answer_after), tokenizer.encode("\n")
            if len(separator) == 1 and len(newline) == 1:
                data.answer_tokens = (separator[0], newline[0])
        shortest = min(len(data.train), len(data.val))
        if shortest <= block_size:
            raise DataError(
                f"The text is too short for a context of {block_size} tokens: its validation split has "
                f"{len(data.val):,} tokens. Use a longer text or a smaller block size."
            )
        return data


def answer_mask(x: torch.Tensor, separator: int, newline: int) -> torch.Tensor:
    """(B, T) bool for inputs x (B, T): True at position i when its target, the token after x[:, i],
    belongs to the answer of a line whose question the window holds whole.

    That is: the last separator in x[:, :i + 1] comes after the last newline there (the target is
    an answer letter or the newline that ends the answer), and that newline exists (the line
    started inside the window). A window that starts mid-line holds answers to a question it
    cannot see, or sees only part of: they are not counted. Vectorised, no loop over the batch.
    """
    positions = torch.arange(x.size(-1), device=x.device).expand_as(x)
    none = torch.full_like(positions, -1)
    last_separator = torch.where(x == separator, positions, none).cummax(-1).values
    last_newline = torch.where(x == newline, positions, none).cummax(-1).values
    return (last_separator > last_newline) & (last_newline >= 0)


def every_window_has_an_answer(data: TokenData, block_size: int) -> bool:
    """Whether the data has answers and every context window `get_batch` can draw counts one (a
    window with none would have no loss to learn from); otherwise `answers_only` counts every target.

    `answer_mask` counts a line's answer from its separator on when the newline before the line is
    in the window too. So the window starting at s counts one exactly when the first line whose
    newline is at or after s has its separator inside the window, before s + block_size (later
    lines have later separators). One search per split, no loop over windows.
    """
    if data.answer_tokens is None:
        return False
    separator, newline = data.answer_tokens
    for ids in (data.train, data.val):
        newlines, separators = (ids == newline).nonzero().flatten(), (ids == separator).nonzero().flatten()
        before = torch.searchsorted(newlines, separators) - 1  # the newline before each separator's line
        line_newlines, separators = newlines[before[before >= 0]], separators[before >= 0]
        starts = torch.arange(len(ids) - block_size)  # every window get_batch can draw
        first = torch.searchsorted(line_newlines, starts)  # each window's first line with its newline
        if (first == len(line_newlines)).any() or (separators[first] - starts >= block_size).any():
            return False
    return True


def get_batch(
    data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator | None = None,
    answers: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of `data`: inputs x and next-token targets y, both (batch_size, block_size).
    With `answers` (a task's separator and newline ids, TokenData.answer_tokens), targets that are
    not answers of a question in the same window (`answer_mask`) are -1, which the loss ignores.

    One gather on a (B, T + 1) index grid, no Python loop over the batch.
    """
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    positions = starts[:, None] + torch.arange(block_size + 1)  # (B, T + 1)
    window = data[positions]
    x, y = window[:, :-1], window[:, 1:]
    if answers is not None:
        y = torch.where(answer_mask(x, *answers), y, -1)
    return x, y
