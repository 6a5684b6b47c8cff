"""Tokenizers with one small interface: encode, decode, vocab_size, readable token labels.

- `CharTokenizer`: one token per character of a vocabulary built from a corpus
  (also the small-alphabet tokenizer of the baby GPT: `CharTokenizer("01")`).
- `GPT2Tokenizer`: GPT-2's byte-pair encoding through tiktoken, built offline from the
  rank file vendored in `assets/gpt2/`.
- `HFTokenizer`: a pretrained Llama-family model's own tokenizer.json, through Hugging Face `tokenizers`.

Each tokenizer describes itself as a small JSON-able `spec` so a checkpoint can rebuild it (a
pretrained model's own tokenizer excepted: those models are read, never saved).

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

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.spec(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return tokenizer_from_spec(json.loads(Path(path).read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=1)
def _gpt2_encoding():
    import tiktoken

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
    return tiktoken.Encoding(
        name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
        special_tokens={END_OF_TEXT: len(ranks)}, explicit_n_vocab=len(ranks) + 1,
    )


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
