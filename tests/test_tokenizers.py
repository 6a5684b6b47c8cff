import hashlib
import random
import shutil

import pytest

from core.tokenizers import (
    GPT2_RANKS_PATH,
    CharTokenizer,
    GPT2Tokenizer,
    token_labels,
    tokenizer_from_spec,
)

R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"


# ---------------------------------------------------------------- characters


def test_char_tokenizer_round_trip_and_sorted_vocabulary():
    tok = CharTokenizer.from_text("hello world\n")
    assert tok.chars == "\n dehlorw"
    assert tok.vocab_size == 9
    ids = tok.encode("hello\n")
    assert ids == [4, 3, 5, 5, 6, 0]
    assert tok.decode(ids) == "hello\n"


def test_char_tokenizer_names_unknown_characters():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError) as error:
        tok.encode("abXcY!")
    message = str(error.value)
    assert "3 character(s)" in message and "'X'" in message and "'Y'" in message and "'!'" in message


def test_char_tokenizer_save_and_load(tmp_path):
    tok = CharTokenizer.from_text("To be, or not to be: ñ 🙂\n")
    tok.save(tmp_path / "vocab.json")
    loaded = CharTokenizer.load(tmp_path / "vocab.json")
    assert loaded.chars == tok.chars
    assert loaded.encode("not ñ 🙂") == tok.encode("not ñ 🙂")


def test_char_labels_make_whitespace_visible():
    tok = CharTokenizer.from_text("a b\n\t")
    assert token_labels(tok, tok.encode("a b\n\t")) == ["a", "␣", "b", "↵", "⇥"]


def test_alphabet_tokenizer_for_the_baby_gpt():
    tok = CharTokenizer("01")
    assert tok.encode("1101") == [1, 1, 0, 1]
    assert tokenizer_from_spec(tok.spec()).chars == "01"


def test_bad_specs_are_refused():
    for spec in ({"kind": "sentencepiece"}, {"kind": "char"}, "gpt2", {"kind": "char", "chars": "aa"}):
        with pytest.raises(ValueError):
            tokenizer_from_spec(spec)


# ---------------------------------------------------------------- GPT-2 BPE


@pytest.fixture(scope="module")
def reference_encoding(tmp_path_factory):
    """tiktoken's own `r50k_base` (= `gpt2`) encoding, fed the vendored file through its cache.

    tiktoken checks the file against its own expected hash, builds the Encoding with its own
    pattern and special tokens: an independent reference for ours.
    """
    import os

    import tiktoken

    cache = tmp_path_factory.mktemp("tiktoken-cache")
    shutil.copy(GPT2_RANKS_PATH, cache / hashlib.sha1(R50K_URL.encode()).hexdigest())
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        return tiktoken.get_encoding("r50k_base")
    finally:
        if old is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old


def sample_strings(count: int) -> list[str]:
    rng = random.Random(1234)
    fixed = [
        "", " ", "Hello world", "  leading spaces", "trailing  ", "tabs\tand\nnewlines\r\n",
        "It's don't we'll they've I'm you'd", "numbers 12345 3.14159 1,000,000",
        "naïve café résumé — “quotes”", "日本語のテキスト", "emoji 🙂🚀👩‍💻", "Ελληνικά и русский",
        "<|endoftext|>", "before<|endoftext|>after", "<|endo", "code: def f(x):\n    return x**2",
        "ALL CAPS SHOUTING!!!", "mixed123abc456", "a" * 200, "\u200b zero width",
    ]
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:'\"!?-\n\téüñß中文🙂"
    random_strings = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(count)]
    return fixed + random_strings


def test_gpt2_ids_match_tiktoken(reference_encoding):
    tok = GPT2Tokenizer()
    assert tok.vocab_size == reference_encoding.n_vocab == 50257
    strings = sample_strings(400)
    for text in strings:
        expected = reference_encoding.encode(text, allowed_special={"<|endoftext|>"})
        assert tok.encode(text) == expected, text
        assert tok.decode(expected) == text


def test_gpt2_known_ids_and_end_of_text():
    tok = GPT2Tokenizer()
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode("<|endoftext|>") == [50256]
    assert tok.end_of_text == 50256
    assert tok.encode("a<|endoftext|>b") == [64, 50256, 65]


def test_gpt2_labels_show_leading_spaces_and_byte_pieces():
    tok = GPT2Tokenizer()
    assert token_labels(tok, tok.encode("Hello world")) == ["Hello", "␣world"]
    # a rare character splits into byte pieces that are not valid UTF-8 on their own
    labels = token_labels(tok, tok.encode("𝔘"))
    assert "".join(labels).startswith("<") and all(label for label in labels)
    assert tokenizer_from_spec(tok.spec()).encode("Hello world") == [15496, 995]


def test_damaged_rank_file_is_detected(tmp_path, monkeypatch):
    import core.tokenizers as tokenizers

    damaged = tmp_path / "r50k_base.tiktoken"
    damaged.write_bytes(GPT2_RANKS_PATH.read_bytes()[:-10])
    monkeypatch.setattr(tokenizers, "GPT2_RANKS_PATH", damaged)
    tokenizers._gpt2_encoding.cache_clear()
    try:
        with pytest.raises(ValueError, match="damaged"):
            GPT2Tokenizer()
    finally:
        tokenizers._gpt2_encoding.cache_clear()
