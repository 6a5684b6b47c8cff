import os

import pytest
import torch

import core.data as data
from core.data import (
    CORPORA,
    DataError,
    TokenData,
    check_user_text,
    corpus_text,
    get_batch,
    load_shakespeare,
    read_text_file,
)
from core.tokenizers import CharTokenizer

# conftest points PLAYGROUND_DATA_DIR at ../shared/data before this module loads
SHAKESPEARE_FILE = os.path.join(os.environ["PLAYGROUND_DATA_DIR"], "tinyshakespeare", "input.txt")


# ---------------------------------------------------------------- Tiny Shakespeare


def test_shakespeare_from_the_data_dir():
    text = load_shakespeare(download=False)
    assert len(text) == 1_115_394
    assert len(set(text)) == 65
    assert text.startswith("First Citizen:")


def test_shakespeare_from_an_explicit_path_is_hash_checked(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(open(SHAKESPEARE_FILE, "rb").read())
    assert len(load_shakespeare(path)) == 1_115_394
    path.write_text("To be or not to be")
    with pytest.raises(DataError, match="sha256"):
        load_shakespeare(path)


def test_offline_without_a_cache_says_how_to_provide_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("PLAYGROUND_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def no_network(*args, **kwargs):
        raise data.urllib.error.URLError(OSError("network is unreachable"))

    monkeypatch.setattr(data.urllib.request, "urlopen", no_network)
    with pytest.raises(DataError) as error:
        load_shakespeare()
    message = str(error.value)
    assert "network is unreachable" in message and "<" not in message  # the UI shows it as HTML
    assert "PLAYGROUND_DATA_DIR" in message and data.SHAKESPEARE_URL in message


def test_download_is_checked_and_cached(tmp_path, monkeypatch):
    monkeypatch.delenv("PLAYGROUND_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    real = open(SHAKESPEARE_FILE, "rb").read()
    served = {"body": b"not shakespeare", "calls": 0}

    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return served["body"]

    def fake_urlopen(url, timeout):
        served["calls"] += 1
        assert url == data.SHAKESPEARE_URL
        return Response()

    monkeypatch.setattr(data.urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(DataError, match="wrong sha256"):
        load_shakespeare()
    assert not (tmp_path / "attention-playground" / "tinyshakespeare" / "input.txt").exists()

    served["body"] = real
    assert len(load_shakespeare()) == 1_115_394
    assert (tmp_path / "attention-playground" / "tinyshakespeare" / "input.txt").is_file()
    assert len(load_shakespeare()) == 1_115_394  # second time from the cache
    assert served["calls"] == 2


def test_data_dir_without_the_file_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match="does not exist"):
        load_shakespeare()


# ---------------------------------------------------------------- synthetic corpora


@pytest.mark.parametrize("name", [n for n in CORPORA if not CORPORA[n].needs_download])
def test_synthetic_corpora_are_deterministic_and_tokenizable(name):
    text = corpus_text(name)
    assert text == corpus_text(name)
    assert len(text) > 5_000
    assert CharTokenizer.from_text(text).vocab_size <= 40


def test_synthetic_tasks_have_their_structure():
    first = corpus_text("repeat").splitlines()[0]
    left, right = first.split("|")
    assert left == right and len(left) == 8
    left, right = corpus_text("reverse").splitlines()[0].split(">")
    assert right == left[::-1]
    left, right = corpus_text("sort").splitlines()[0].split("=")
    assert right == "".join(sorted(left))
    assert set(corpus_text("binary")) == {"0", "1"}


def test_the_induction_task_writes_words_of_3_to_12_distinct_letters_twice():
    lines = corpus_text("induction").splitlines()
    halves = [line.split("|") for line in lines]
    assert all(len(pair) == 2 and pair[0] == pair[1] for pair in halves)
    lengths = [len(word) for word, _ in halves]
    assert set(lengths) == set(range(3, 13))  # every length, so no fixed offset finds the letter to copy
    assert all(len(set(word)) == len(word) and set(word) <= set(data.LETTERS) for word, _ in halves)


def test_each_task_corpus_is_its_tasks_lines():
    """Declared once: every line of a task corpus is a question as the task says, its separator, its answer."""
    for name, info in CORPORA.items():
        if info.task is None:
            continue
        task = info.task
        for line in corpus_text(name).splitlines()[:500]:
            question, answer = line.split(task.separator)
            assert answer == task.answer(question) and task.unlike_training(line) == []
            assert task.shortest <= len(question) <= task.longest and set(question) <= set(task.alphabet)
    assert [CORPORA[name].task.questions() for name in ("repeat", "induction", "reverse", "sort")] == [
        "8-letter words (a–z)", "words of 3 to 12 different letters (a–z)", "8-letter words (a–z)",
        "8-digit numbers (0–9)"]


def test_a_task_prompt_starts_a_line_as_every_training_line_did():
    task = CORPORA["repeat"].task
    assert corpus_text("repeat").count("\n") == 6000  # every line ends with one, so the next starts after it
    assert task.as_line("qwhzbkad|") == "\nqwhzbkad|"
    assert task.as_line("\nqwhzbkad|") == "\nqwhzbkad|"  # one is enough: never a second
    assert task.as_line("") == "\n"


@pytest.mark.parametrize("corpus, prompt, unlike", [
    ("repeat", "\nqwhzbkad|", []),
    ("repeat", "qwhzbkad|qwh", []),  # an answer begun
    ("repeat", "qwhz", []),  # a question still being typed
    ("repeat", "hello|", [("hello", "has 5 letters")]),
    ("repeat", "qwhzbkadx", [("qwhzbkadx", "has 9 letters")]),  # too long even unfinished
    ("repeat", "hello\nqwhzbkad|", [("hello", "has 5 letters")]),  # a finished line needs no separator to count
    ("repeat", "|a", [("", "has 0 letters")]),
    ("repeat", "a|", [("a", "has 1 letter")]),
    ("induction", "hello|", [("hello", "has a letter twice")]),
    ("induction", "qwe|qwe\nbdkzwaxfmo|", []),
    ("induction", "abcdefghijklm|", [("abcdefghijklm", "has 13 letters")]),
    ("sort", "3815a706=", [("3815a706", "has characters other than the digits 0–9")]),
    ("reverse", "qwhzbkad>", []),
])
def test_questions_unlike_the_training_ones_are_named(corpus, prompt, unlike):
    assert CORPORA[corpus].task.unlike_training(prompt) == unlike


def test_unknown_corpus():
    with pytest.raises(DataError, match="unknown corpus"):
        corpus_text("wikipedia")


# ---------------------------------------------------------------- user text


def test_user_text_checks():
    assert check_user_text("x" * 100, min_chars=64) == "x" * 100
    with pytest.raises(DataError, match="empty"):
        check_user_text("   \n ", min_chars=8)
    with pytest.raises(DataError, match="longer than 64"):
        check_user_text("short text", min_chars=64)
    with pytest.raises(DataError, match="limit"):
        check_user_text("é" * 600, min_chars=8, max_bytes=1000)


def test_uploaded_files(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("Καλημέρα κόσμε " * 20, encoding="utf-8")
    assert read_text_file(good, min_chars=64).startswith("Καλημέρα")

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(("café " * 40).encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_text_file(latin1, min_chars=64)

    binary = tmp_path / "image.txt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00" * 30)
    with pytest.raises(DataError, match="binary"):
        read_text_file(binary, min_chars=64)

    big = tmp_path / "big.txt"
    big.write_text("a" * 2000)
    with pytest.raises(DataError, match="limit"):
        read_text_file(big, min_chars=64, max_bytes=1000)


# ---------------------------------------------------------------- tokens and batches


def test_split_and_batches():
    text = corpus_text("repeat")
    tok = CharTokenizer.from_text(text)
    tokens = TokenData.from_text(text, tok, block_size=16)
    total = len(tokens.train) + len(tokens.val)
    assert total == len(text)
    assert len(tokens.train) == int(0.9 * total)

    g = torch.Generator().manual_seed(7)
    x, y = get_batch(tokens.train, 5, 16, g)
    assert x.shape == y.shape == (5, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one

    # each row is a real window of the data
    joined = tok.decode(tokens.train.tolist())
    for row_x, row_y in zip(x, y):
        window = tok.decode(row_x.tolist()) + tok.decode(row_y[-1:].tolist())
        assert window in joined

    # seeded: the same generator seed gives the same batch, another seed another
    x2, _ = get_batch(tokens.train, 5, 16, torch.Generator().manual_seed(7))
    x3, _ = get_batch(tokens.train, 5, 16, torch.Generator().manual_seed(8))
    assert torch.equal(x, x2) and not torch.equal(x, x3)


def test_text_too_short_for_the_context():
    tok = CharTokenizer("ab")
    with pytest.raises(DataError, match="too short"):
        TokenData.from_text("ab" * 100, tok, block_size=64)


def marks(mask: torch.Tensor) -> str:
    return "".join("x" if m else "." for m in mask.tolist())


def test_answer_mask_counts_the_answers_of_questions_the_window_holds():
    from core.data import answer_mask

    tokenizer = CharTokenizer.from_text("abcd|\n")
    separator, newline = tokenizer.encode("|")[0], tokenizer.encode("\n")[0]
    # position i is marked when its target, the token after it, is an answer letter or the newline
    # that ends the answer, of a line whose newline before it is in the window
    whole = "\nab|ab\nba|ba\n"
    assert marks(answer_mask(torch.tensor([tokenizer.encode(whole)]), separator, newline)[0]) == "...xxx...xxx."
    # windows that start mid-line: the first line's question is cut, so none of its answer counts,
    # even where the separator is in the window (the letters before it were not seen)
    cut = "b|ab\nba|ba\nc"
    assert marks(answer_mask(torch.tensor([tokenizer.encode(cut)]), separator, newline)[0]) == ".......xxx.."
    # the last position's target lies past the window; it is marked like any other
    open_answer = "ab\ncd|c"
    assert marks(answer_mask(torch.tensor([tokenizer.encode(open_answer)]), separator, newline)[0]) == ".....xx"
    # every row of a batch on its own, no loop: the same rows stacked give the same marks
    batch = torch.tensor([tokenizer.encode(whole[:12]), tokenizer.encode(cut)])
    assert [marks(row) for row in answer_mask(batch, separator, newline)] == ["...xxx...xxx", ".......xxx.."]


def test_batches_count_only_the_answers_in_view():
    from core.data import answer_mask

    text = corpus_text("induction")
    tokenizer = CharTokenizer.from_text(text)
    data = TokenData.from_text(text, tokenizer, 40, answer_after="|")
    x, y = get_batch(data.train, 16, 40, torch.Generator().manual_seed(3), data.answer_tokens)
    _, every = get_batch(data.train, 16, 40, torch.Generator().manual_seed(3))
    counted = answer_mask(x, *data.answer_tokens)
    assert torch.equal(y == -1, ~counted) and torch.equal(y[counted], every[counted])


def test_task_corpora_know_their_separator_and_other_text_does_not():
    tokenizer = CharTokenizer.from_text(corpus_text("repeat"))
    data = TokenData.from_text(corpus_text("repeat"), tokenizer, 16, answer_after="|")
    assert data.answer_tokens == (tokenizer.encode("|")[0], tokenizer.encode("\n")[0])
    assert TokenData.from_text(corpus_text("repeat"), tokenizer, 16).answer_tokens is None
