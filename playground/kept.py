"""What the app keeps of a session beside its model: a checkpoint archive with the runs to compare and the attention movie.

    kept = keep(model, tokenizer, meta, training_state, runs, movie)   # bytes, taken on the training thread
    kept.write_archive(folder / "state.zip", compress=False)           # written later, by the store's thread
    model, tokenizer, meta = checkpoint.load(archive)                  # the archive is a checkpoint ...
    runs, movie = load_kept(archive, model.config)                     # ... with the app's two files beside it

    model.safetensors, config.json, trainer.safetensors    the checkpoint (`core.checkpoint`)
    runs.safetensors                                       the runs kept to compare (`core.runs.encode_runs`)
    movie.safetensors                                      the attention movie (`core.movie.encode_movie`)

Each of the app's files is read with the checkpoint's hard caps and checks (`core.checkpoint.read_extra`)
and decoded with every field checked; a problem is a CheckpointError that names the file.
Never imports gradio, a tab or the sessions: it is given plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.checkpoint import CheckpointError, Encoded, encode, read_extra, write_archive
from core.config import GPTConfig
from core.model import GPT
from core.movie import ENCODED_MOVIE_BYTES, AttentionMovie, decode_movie, encode_movie
from core.runs import ENCODED_RUNS_BYTES, RunLog, decode_runs, encode_runs
from core.tokenizers import Tokenizer

RUNS_FILE = "runs.safetensors"
MOVIE_FILE = "movie.safetensors"


@dataclass(frozen=True)
class Kept:
    """A session encoded in memory (taken where the model lives, written elsewhere while it trains on)."""

    checkpoint: Encoded
    runs: bytes | None = None  # core.runs.encode_runs
    movie: bytes | None = None  # core.movie.encode_movie

    @property
    def files(self) -> dict[str, bytes | None]:
        return {**self.checkpoint.files, RUNS_FILE: self.runs, MOVIE_FILE: self.movie}

    def write_archive(self, path: str | Path, compress: bool = True) -> Path:
        """Write it as one .zip file (`core.checkpoint.write_archive`); returns its path."""
        return write_archive(path, self.files, compress)


def keep(model: GPT, tokenizer: Tokenizer, meta: dict, training_state: dict | None, runs: RunLog,
         movie: AttentionMovie | None) -> Kept:
    """A session's model, training state and `meta`, its runs to compare and its movie (if it has snapshots)."""
    return Kept(encode(model, tokenizer, meta, training_state), encode_runs(runs),
                encode_movie(movie) if movie is not None and movie.frames else None)


def load_kept(path: str | Path, config: GPTConfig) -> tuple[RunLog | None, AttentionMovie | None]:
    """The runs to compare and the attention movie kept beside a `config` model (`Kept`), each or None."""
    kept = []
    for name, limit, decode in ((RUNS_FILE, ENCODED_RUNS_BYTES, decode_runs),
                                (MOVIE_FILE, ENCODED_MOVIE_BYTES, lambda data: decode_movie(data, config))):
        data = read_extra(path, name, limit)
        try:
            kept.append(None if data is None else decode(data))
        except ValueError as error:
            raise CheckpointError(f"{name}: {error}") from None
    return kept[0], kept[1]
