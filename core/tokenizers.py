"""Tokenizers with one small interface: encode, decode, vocab_size, readable token labels.

- `CharTokenizer`: one token per character of a vocabulary built from a corpus
  (also the small-alphabet tokenizer of the baby GPT: `CharTokenizer("01")`).
- `GPT2Tokenizer`: GPT-2's byte-pair encoding through tiktoken, built offline from the
  rank file vendored in `assets/gpt2/`.
- `HFTokenizer`: a pretrained Llama-family model's own tokenizer.json, through Hugging Face `tokenizers`.

Each tokenizer describes itself as a small JSON-able `spec` so a checkpoint can rebuild it (a
pretrained model's own tokenizer excepted: those models are read, never saved), and as a Hugging Face
`tokenizers.Tokenizer` that encodes exactly as it does (`huggingface()`: an exported model's tokenizer.json).

Imports nothing of the project. Never imports the model, gradio, plotly or `playground`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from pathlib import Path
from typing import Protocol

import tokenizers

ASSETS = Path(__file__).resolve().parent.parent / "assets"
GPT2_RANKS_PATH = ASSETS / "gpt2" / "r50k_base.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
# tiktoken's r50k_base split pattern (GPT-2's regex, written for tiktoken's engine)
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
END_OF_TEXT = "<|endoftext|>"

# How invisible characters are drawn in token labels.
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def token_label(self, token_id: int) -> str: ...

    def spec(self) -> dict: ...

    def huggingface(self) -> tokenizers.Tokenizer: ...


def visible(text: str) -> str:
    """`text` with spaces, newlines and tabs drawn as visible symbols."""
    return "".join(VISIBLE.get(ch, ch) for ch in text)


class CharTokenizer:
    """One token per character; ids follow the sorted vocabulary."""

    def __init__(self, chars: str) -> None:
        if not chars:
            raise ValueError("a character vocabulary needs at least one character")
        if len(set(chars)) != len(chars):
            raise ValueError("the character vocabulary has repeated characters")
        self.chars = chars
        self.vocab_size = len(chars)
        self._ids = {ch: i for i, ch in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[ch] for ch in text]
        except KeyError:
            unknown = sorted(set(text) - set(self._ids))
            shown = ", ".join(repr(ch) for ch in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
            raise ValueError(
                f"{len(unknown)} character(s) are not in this model's vocabulary: {shown}"
            ) from None

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def token_label(self, token_id: int) -> str:
        return visible(self.chars[token_id])

    def spec(self) -> dict:
        return {"kind": "char", "chars": self.chars}

    def huggingface(self) -> tokenizers.Tokenizer:
        """Every character a word of a WordLevel vocabulary with our ids; a character outside it is an
        error there too (the vocabulary has no unknown token)."""
        tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(self._ids, unk_token=None))
        # [\s\S]: any character, line breaks included (`.` would skip them)
        tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"[\s\S]"), behavior="isolated")
        tokenizer.decoder = tokenizers.decoders.Fuse()  # the characters joined as they are, not with spaces
        return tokenizer

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.spec(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return tokenizer_from_spec(json.loads(Path(path).read_text(encoding="utf-8")))


def _gpt2_ranks() -> dict[bytes, int]:
    """GPT-2's tokens (bytes) and their ranks, read from the vendored file and checked."""
    data = GPT2_RANKS_PATH.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != GPT2_RANKS_SHA256:
        raise ValueError(
            f"{GPT2_RANKS_PATH} is damaged (sha256 {digest}, expected {GPT2_RANKS_SHA256}); "
            "restore it from the repository"
        )
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.lru_cache(maxsize=1)
def _gpt2_encoding():
    import tiktoken

    ranks = _gpt2_ranks()
    return tiktoken.Encoding(
        name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
        special_tokens={END_OF_TEXT: len(ranks)}, explicit_n_vocab=len(ranks) + 1,
    )


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of bytes, as its vocab.json and merges.txt write tokens: the printable
    Latin-1 bytes stand for themselves, the others (spaces, control bytes) for the characters from 256 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


@functools.lru_cache(maxsize=1)
def _gpt2_vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's vocabulary and merges as Hugging Face spells them, derived from tiktoken's ranks: a token's
    rank is the order of its merge, and its two halves are what byte-pair encoding makes of it with the
    merges ranked before it alone (about a second, once)."""
    ranks, spelled = _gpt2_ranks(), _bytes_to_unicode()

    def spell(token: bytes) -> str:
        return "".join(spelled[b] for b in token)

    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue  # the 256 single bytes come first and merge nothing
        parts = [bytes([b]) for b in token]
        # Merge the earliest-ranked pair until two halves are left: in GPT-2's (checked) ranks a token's
        # bytes always get there through merges ranked before it.
        while len(parts) > 2:
            _, i = min((ranks.get(a + b, len(ranks)), i) for i, (a, b) in enumerate(zip(parts, parts[1:])))
            parts[i: i + 2] = [parts[i] + parts[i + 1]]
        merges.append((spell(parts[0]), spell(parts[1])))
    return {spell(token): rank for token, rank in ranks.items()}, merges


class GPT2Tokenizer:
    """GPT-2's byte-pair encoding (50,257 tokens); `<|endoftext|>` in text is the special token."""

    def __init__(self) -> None:
        self._enc = _gpt2_encoding()
        self.vocab_size = self._enc.n_vocab
        self.end_of_text = self._enc.eot_token

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, allowed_special={END_OF_TEXT})

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)

    def token_label(self, token_id: int) -> str:
        raw = self._enc.decode_single_token_bytes(token_id)
        try:
            return visible(raw.decode("utf-8"))
        except UnicodeDecodeError:  # a piece of a multi-byte character
            return "".join(f"<{b:02X}>" for b in raw)

    def spec(self) -> dict:
        return {"kind": "gpt2"}

    def huggingface(self) -> tokenizers.Tokenizer:
        """GPT-2's own tokenizer.json: byte-level BPE over GPT-2's split pattern, `<|endoftext|>` special."""
        vocab, merges = _gpt2_vocab_and_merges()
        tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges))
        tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = tokenizers.decoders.ByteLevel()
        tokenizer.add_special_tokens([END_OF_TEXT])  # the last id, as in tiktoken
        return tokenizer


class HFTokenizer:
    """A Hugging Face `tokenizers` tokenizer, read from a pretrained model's tokenizer.json (SmolLM2's
    49,152-token byte-level BPE, say). Special tokens in text are encoded as text, as the other
    tokenizers do; a model's own special tokens still decode."""

    def __init__(self, tokenizer: tokenizers.Tokenizer) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()

    @classmethod
    def from_file(cls, path: str | Path) -> "HFTokenizer":
        try:
            return cls(tokenizers.Tokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises a bare Exception for a file it cannot parse
            raise ValueError(f"{path} is not a tokenizer.json that Hugging Face tokenizers can read: {error}") from None

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def token_label(self, token_id: int) -> str:
        return visible(self.decode([token_id]))

    def spec(self) -> dict:
        # Not rebuilt from a spec: its vocabulary is the pretrained model's file, which checkpoints never hold.
        return {"kind": "huggingface", "vocab_size": self.vocab_size}

    def huggingface(self) -> tokenizers.Tokenizer:
        return self._tokenizer


def tokenizer_from_spec(spec: dict) -> Tokenizer:
    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind == "char":
        chars = spec.get("chars")
        if not isinstance(chars, str):
            raise ValueError("a character tokenizer spec needs 'chars', a string")
        return CharTokenizer(chars)
    if kind == "gpt2":
        return GPT2Tokenizer()
    if kind == "huggingface":
        raise ValueError("a pretrained model's own tokenizer cannot be rebuilt from a checkpoint")
    raise ValueError(f"unknown tokenizer spec: {spec!r}")


def token_labels(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.token_label(i) for i in ids]
