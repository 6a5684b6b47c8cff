"""Safetensors bytes read in one place: a round trip, and each hostile header refused by name, by every reader."""

import json
import struct

import pytest
import torch

from core.checkpoint import CheckpointError, load_trainer_state, save
from core.config import GPTConfig
from core.model import GPT
from core.movie import decode_movie
from core.runs import decode_runs
from core.tensorfile import TensorFileError, pack, unpack
from core.tokenizers import CharTokenizer


def raw(header: object, body: bytes = b"", claimed: int | None = None) -> bytes:
    """Safetensors-shaped bytes: a length (the true one unless `claimed`), `header` as JSON, then `body`."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if claimed is None else claimed) + text + body


def test_tensors_and_metadata_come_back_as_they_were():
    tensors = {"maps": torch.rand(2, 3, dtype=torch.float16), "steps": torch.tensor([5, 10])}
    back, metadata = unpack(pack(tensors, {"every": "4"}), limit=10_000)
    assert metadata == {"every": "4"} and back.keys() == tensors.keys()
    assert all(torch.equal(back[name], tensors[name]) and back[name].dtype == tensors[name].dtype for name in tensors)
    assert unpack(pack({"x": torch.zeros(1)}), limit=10_000)[1] == {}  # no metadata: an empty one


@pytest.mark.parametrize("data, message", [
    (pack({"x": torch.zeros(60_000)}), "240,072 bytes; at most 200,000 are read"),
    (b"\x05\x00\x00", "too short"),
    (raw({}, claimed=1 << 40), "claims 1,099,511,627,776 bytes; 2 follow"),
    (raw(b"{not json"), "not valid JSON"),
    (raw(b"[" * 50_000 + b"]" * 50_000), "not valid JSON"),  # nesting deep enough to exhaust the recursion
    (raw(b"\xff\xfe"), "not valid JSON"),  # not UTF-8
    (raw([1, 2]), "not a JSON object"),
    (raw({"__metadata__": {"trainer": 5}}), "not a JSON object with text metadata"),
    (raw({"__metadata__": ["a"]}), "not a JSON object with text metadata"),
    (raw({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, body=bytes(8)), "not fully covered"),  # past the end
    (raw({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, body=bytes(8)), "invalid shape"),  # 4 floats in 8 bytes
])
def test_a_hostile_header_is_refused_by_name(data, message):
    with pytest.raises(TensorFileError, match=message):
        unpack(data, limit=200_000)


HOSTILE = raw({"__metadata__": {"a": 1}})  # passes no reader: each names its own file


def test_every_reader_refuses_a_hostile_header_through_the_one_reader(tmp_path):
    with pytest.raises(ValueError, match="the movie is damaged .*text metadata"):
        decode_movie(HOSTILE, GPTConfig())
    with pytest.raises(ValueError, match="the runs are damaged .*text metadata"):
        decode_runs(HOSTILE)
    tokenizer = CharTokenizer("ab")
    folder = save(tmp_path / "ck", GPT(GPTConfig(vocab_size=2, block_size=4, n_layer=1, n_head=1, n_embd=4)), tokenizer)
    (folder / "trainer.safetensors").write_bytes(HOSTILE)
    with pytest.raises(CheckpointError, match="trainer.safetensors is damaged or truncated .*text metadata"):
        load_trainer_state(folder)
