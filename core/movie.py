"""Attention over training: every head's map on a probe text, snapshot after snapshot, in bounded
memory; each head's pattern scores at every snapshot; the moment an induction head forms.

    movie = AttentionMovie(probe_ids, max_bytes=2 * 2**20)
    snapshots = AttentionProbe(ids=probe_ids)  # core.observers
    for event in trainer.run():
        if not event.done and movie.wants(event.step):
            probe = probe_induction(trainer.model) if movie.probe_due(event.done) else None
            movie.add(event.step, snapshots.attention(trainer), probe)
    movie.frames[-1].maps                  # (L, H, T, T) float16, the last snapshot
    steps, previous = movie.score_curve("previous-token")   # (F,) steps and (F, L, H) scores on the probe text
    steps, induction = movie.induction_curve()  # (F, L, H) each head's induction verdict's score
    onset = induction_onset(movie)         # the first step from which an induction head stays formed
    formed = copying_onset(movie)          # ... from which some head copies (the copy task's, or induction)

Which head is an induction head is decided as on the Attention tab, by `core.attention.is_induction_head`:
a head past layer 0 that follows the repeats in random tokens written twice (`probe_induction`, measured
at every PROBED_EVERY-th snapshot and the last: it costs a few snapshots). The probe text's own induction
score is no evidence: on a text that repeats with one period, a head that looks back a fixed distance
scores as high (the copy task's layer-0 head does).

When the snapshots outgrow `max_bytes`, every other one is dropped and snapshots are taken half
as often: the movie always spans the whole run, ever more coarsely.

    Path("movie.gif").write_bytes(movie_gif(movie))   # every snapshot, a layer per row, a head per column
    data = encode_movie(movie)                         # safetensors bytes, kept beside the model (the state store)
    movie = decode_movie(data, model.config)           # every field checked against the model it belongs to

Imports the pattern scores of `core.attention` and the model's config (what a decoded movie is checked
against). Never imports the training loop (the caller
feeds it snapshots), gradio, plotly or `playground`.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from core.attention import STRONG_PATTERN, induction_heads, induction_verdict_scores, pattern_scores
from core.config import GPTConfig
from core.tensorfile import pack, unpack

MOVIE_BYTES = 2 * 2**20  # a session's snapshots: 2 MiB (sixty learners: 120 MiB at most)
# The maps; each frame's probe scores (4 bytes a head, at most 2 / T² of the maps' bytes: a quarter for a probe
# of 3 tokens or more); their steps (8 bytes each) and the header.
ENCODED_MOVIE_BYTES = MOVIE_BYTES + MOVIE_BYTES // 4 + (1 << 20)
SCORED = ("previous-token", "first-token")  # the patterns scored on the probe text, drawn under the loss curve
INDUCTION = "induction"  # drawn after them: the induction verdict's score (random tokens written twice)
# The induction probe (two forward passes, each scored: about three snapshots' cost) runs at every 4th
# snapshot and a run's last, so that the replay keeps most of its snapshots within the view budget.
PROBED_EVERY = 4
# The GIF: at most this wide, each head's map at most GIF_CELL_PX square; a frame per snapshot, the
# last held longer. Its colours are the app's (plotly's "Blues", white = no weight), in a fixed palette.
GIF_WIDTH_PX, GIF_CELL_PX, GIF_GAP_PX, GIF_CAPTION_PX = 720, 120, 4, 22
GIF_FRAME_MS, GIF_LAST_FRAME_MS = 150, 2000
# A movie of tiny maps may hold thousands of snapshots (one a step) in its budget: the GIF takes this many,
# evenly spread, so its memory (frames x pixels, at most ~60 MB while it is written) and size stay bounded.
GIF_MAX_FRAMES = 100
BLUES = ((247, 251, 255), (222, 235, 247), (198, 219, 239), (158, 202, 225), (107, 174, 214), (66, 146, 198),
         (33, 113, 181), (8, 81, 156), (8, 48, 107))
GIF_LEVELS = 254  # palette entries for weights 0..1; then the gap grey and the caption's ink
GAP, INK = GIF_LEVELS, GIF_LEVELS + 1


@dataclass(frozen=True)
class Frame:
    step: int
    maps: torch.Tensor  # (L, H, T, T) float16: half the memory, about 3 significant digits
    scores: dict[str, torch.Tensor | None]  # pattern -> (L, H) chance-corrected score; None: the probe cannot show it
    probe: torch.Tensor | None = None  # (L, H) float32 `probe_induction` at this step; None: not measured
    # the best head's chance-corrected score for copying on the probe text (its "induction" pattern: the token
    # after the current one's earlier occurrence); NaN where the probe text repeats no token
    copying: float = float("nan")


class AttentionMovie:
    """Snapshots of attention on `probe_ids` taken every `every` steps (doubling as memory fills)."""

    def __init__(self, probe_ids: list[int], every: int = 1, max_bytes: int = MOVIE_BYTES) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.probe_ids = list(probe_ids)
        self.every = every
        self.max_bytes = max_bytes
        self.frames: list[Frame] = []

    @property
    def nbytes(self) -> int:
        return sum(frame.maps.numel() * frame.maps.element_size() for frame in self.frames)

    def wants(self, step: int) -> bool:
        """Whether a snapshot at `step` would be kept (compute the maps only then)."""
        return step % self.every == 0

    def add(self, step: int, maps: list[torch.Tensor] | torch.Tensor, probe: torch.Tensor | None = None) -> None:
        """Keep the snapshot at `step`: per layer (H, T, T) maps, or one (L, H, T, T) tensor, and each head's
        `probe_induction` score (L, H) at that step (None where the context is too short for it). A snapshot
        at the newest one's step takes its place (the run's last step, probed now)."""
        kept = (torch.stack(list(maps)) if not isinstance(maps, torch.Tensor) else maps).cpu().half()
        # scored as kept: a movie decoded from its maps (`decode_movie`) gets the very same scores
        patterns = pattern_scores(kept.float(), self.probe_ids)
        scores = {name: None if result is None else result[1] for name, result in patterns.items() if name in SCORED}
        copies = patterns.get("induction")
        copying = float("nan") if copies is None else float(copies[1].nan_to_num(-1.0).max())
        if probe is not None and probe.shape != kept.shape[:2]:
            raise ValueError(f"the probe scores are {tuple(probe.shape)} but the maps have "
                             f"{tuple(kept.shape[:2])} heads")
        frame = Frame(step, kept, scores, None if probe is None else probe.detach().float().cpu(), copying)
        if frame.maps.numel() * frame.maps.element_size() > self.max_bytes:
            raise ValueError(f"one snapshot takes {frame.maps.numel() * 2:,} bytes, more than the movie's "
                             f"{self.max_bytes:,}: use a shorter probe or a larger budget")
        if self.frames and self.frames[-1].step == step:
            self.frames.pop()
        self.frames.append(frame)
        while self.nbytes > self.max_bytes:  # thin out, keeping the first and the newest frames
            self.frames = self.frames[:-1][::2] + self.frames[-1:]
            self.every *= 2

    def probe_due(self, done: bool) -> bool:
        """Whether the snapshot about to be added should carry the induction probe's scores: every
        PROBED_EVERY-th (the first included) and a run's last, whose verdict the replay states."""
        return done or len(self.frames) % PROBED_EVERY == 0

    def last_probed(self) -> Frame | None:
        """The newest snapshot with the induction probe's scores (None: none has them)."""
        return next((frame for frame in reversed(self.frames) if frame.probe is not None), None)

    def rewind(self, step: int) -> None:
        """Forget the snapshots after `step`: the training went back there (a divergence restores older weights)."""
        self.frames = [frame for frame in self.frames if frame.step <= step]

    def score_curve(self, pattern: str) -> tuple[list[int], torch.Tensor] | None:
        """Each frame's step and the (F, L, H) scores of `pattern` on the probe text; None where the probe
        cannot show it."""
        if pattern not in SCORED:
            raise ValueError(f"pattern must be one of {SCORED}, got {pattern!r}")
        kept = [frame for frame in self.frames if frame.scores[pattern] is not None]
        if not kept:
            return None
        return [frame.step for frame in kept], torch.stack([frame.scores[pattern] for frame in kept])

    def induction_curve(self) -> tuple[list[int], torch.Tensor] | None:
        """Each measured frame's step and the (F, L, H) scores the induction verdict reads
        (`induction_verdict_scores`: 0 in layer 0); None where no frame was measured."""
        kept = [frame for frame in self.frames if frame.probe is not None]
        if not kept:
            return None
        return [frame.step for frame in kept], torch.stack([induction_verdict_scores(frame.probe) for frame in kept])

    def curves(self) -> dict[str, tuple[list[int], torch.Tensor] | None]:
        """What the head scores chart draws, by name: each SCORED pattern's score on the probe text, then
        INDUCTION, the induction verdict's score."""
        return {**{pattern: self.score_curve(pattern) for pattern in SCORED}, INDUCTION: self.induction_curve()}


def encode_movie(movie: AttentionMovie) -> bytes:
    """The movie as safetensors bytes: its maps stacked (F, L, H, T, T), their steps and induction probe scores
    (F, L, H; NaN where a frame was not measured); the probe text and the pace as metadata. The pattern scores
    are not kept: `decode_movie` computes them again from the maps."""
    if not movie.frames:
        raise ValueError("the movie has no snapshots to encode")
    unmeasured = torch.full(movie.frames[0].maps.shape[:2], float("nan"))
    tensors = {"maps": torch.stack([frame.maps for frame in movie.frames]).contiguous(),
               "steps": torch.tensor([frame.step for frame in movie.frames], dtype=torch.int64),
               "probe": torch.stack([unmeasured if f.probe is None else f.probe for f in movie.frames]).contiguous()}
    metadata = {"probe_ids": json.dumps(movie.probe_ids), "every": str(movie.every), "max_bytes": str(movie.max_bytes)}
    return pack(tensors, metadata)


def decode_movie(data: bytes, config: GPTConfig) -> AttentionMovie:
    """The inverse of `encode_movie`, every field checked, against the model (`config`) it belongs to too:
    a ValueError names the first that is wrong."""
    try:
        tensors, metadata = unpack(data, ENCODED_MOVIE_BYTES)
        probe_ids, every = json.loads(metadata["probe_ids"]), int(metadata["every"])
        max_bytes = int(metadata["max_bytes"])
        maps, steps = tensors.pop("maps"), tensors.pop("steps")
        probes = tensors.pop("probe", None)  # a movie stored before the probe scores were kept has none
    except (ValueError, KeyError, RecursionError) as error:  # the file (TensorFileError), JSON, int(), a missing key
        raise ValueError(f"the movie is damaged ({type(error).__name__}: {str(error)[:200]})") from None
    if tensors or maps.dtype != torch.float16 or steps.dtype != torch.int64 or maps.dim() != 5 or steps.dim() != 1:
        raise ValueError("the movie's tensors are not (snapshots, layers, heads, tokens, tokens) float16 maps "
                         "and their int64 steps")
    frames, layers, heads, tokens, keys = maps.shape
    if (layers, heads) != (config.n_layer, config.n_head) or tokens != keys or not 0 < frames == len(steps):
        raise ValueError(f"the movie's maps are {tuple(maps.shape)}: not a {config.n_layer}-layer, "
                         f"{config.n_head}-head model's, with a step each")
    if (not isinstance(probe_ids, list) or len(probe_ids) != tokens or tokens > config.block_size
            or not all(isinstance(i, int) and 0 <= i < config.vocab_size for i in probe_ids)):
        raise ValueError(f"the movie's probe is not {tokens} token ids of this model's vocabulary and context")
    if not (0 < maps.numel() * 2 <= max_bytes <= MOVIE_BYTES and 1 <= every <= 2**40):
        raise ValueError(f"the movie's size or pace is out of bounds ({maps.numel() * 2:,} bytes, budget "
                         f"{max_bytes:,}, every {every})")
    if bool((steps < 0).any()) or bool((steps[1:] <= steps[:-1]).any()):
        raise ValueError("the movie's steps do not go up one snapshot after another")
    if not bool(((maps >= 0) & (maps <= 1)).all()):  # NaN fails both
        raise ValueError("the movie's attention weights are not all between 0 and 1")
    probes = [None] * frames if probes is None else _checked_probes(probes, maps.shape[:3])
    movie = AttentionMovie(probe_ids, every=every, max_bytes=max_bytes)
    for step, frame, probe in zip(steps.tolist(), maps, probes):
        movie.add(step, frame, probe)  # its scores computed again; within the budget, nothing is thinned
    return movie


def _checked_probes(probes: torch.Tensor, shape: tuple[int, int, int]) -> list[torch.Tensor | None]:
    """A decoded movie's (F, L, H) probe scores, each frame's (L, H) or None (all NaN: not measured)."""
    if probes.dtype != torch.float32 or tuple(probes.shape) != tuple(shape):
        raise ValueError(f"the movie's probe scores are not float32 {tuple(shape)}: a score per snapshot and head")
    measured = ~probes.isnan().flatten(1).all(1)  # (F,)
    if not bool(((probes[measured] >= 0) & (probes[measured] <= 1)).all()):
        raise ValueError("the movie's probe scores are not all between 0 and 1")
    return [frame if is_measured else None for frame, is_measured in zip(probes, measured.tolist())]


def evenly(items: list, limit: int) -> list:
    """At most `limit` (at least 2) of `items`, evenly spaced, the first and the last kept."""
    if len(items) <= limit:
        return items
    picks = {round(i * (len(items) - 1) / (limit - 1)) for i in range(limit)}
    return [items[i] for i in sorted(picks)]


def induction_onset(movie: AttentionMovie) -> int | None:
    """The step of the first probed snapshot from which some head is an induction head (`is_induction_head`,
    as the Attention tab decides) in every probed snapshot to the end; None if none is at the last."""
    probed = [frame for frame in movie.frames if frame.probe is not None]
    formed = [bool(induction_heads(frame.probe)) for frame in probed]
    if not formed or not formed[-1]:
        return None
    first = len(formed) - formed[::-1].index(False) if False in formed else 0
    return probed[first].step


def copying_onset(movie: AttentionMovie) -> int | None:
    """The step of the first snapshot from which the model copies in every snapshot to the end: some head
    scores at least STRONG_PATTERN for copying on the probe text (`Frame.copying`: the copy task's head that
    looks a fixed distance back scores so, as an induction head does), or the induction verdict names a head;
    None if the last snapshot shows neither. What a class view calls "the head formed at"."""
    formed = [frame.copying >= STRONG_PATTERN or bool(induction_heads(frame.probe)) for frame in movie.frames]
    if not formed or not formed[-1]:
        return None
    first = len(formed) - formed[::-1].index(False) if False in formed else 0
    return movie.frames[first].step


def movie_gif(movie: AttentionMovie, width: int = GIF_WIDTH_PX) -> bytes:
    """The movie as an animated GIF: a frame per snapshot (at most GIF_MAX_FRAMES of them, evenly spread),
    captioned with its step, layers as rows and heads as columns on one colour scale (0 white, 1 dark
    blue). At most `width` pixels wide."""
    if not movie.frames:
        raise ValueError("the movie has no snapshots yet")
    n_layer, n_head, n_tokens, _ = movie.frames[0].maps.shape
    cell = max(8, min(GIF_CELL_PX, (width - GIF_GAP_PX * (n_head + 1)) // n_head))
    size = (GIF_GAP_PX + n_head * (cell + GIF_GAP_PX), GIF_CAPTION_PX + GIF_GAP_PX + n_layer * (cell + GIF_GAP_PX))
    images = [_gif_frame(frame, cell, size) for frame in evenly(movie.frames, GIF_MAX_FRAMES)]
    durations = [GIF_FRAME_MS] * (len(images) - 1) + [GIF_LAST_FRAME_MS]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=durations, loop=0,
                   optimize=False)
    return out.getvalue()


def _gif_frame(frame: Frame, cell: int, size: tuple[int, int]) -> Image.Image:
    image = Image.new("P", size, GAP)
    image.putpalette(_gif_palette())
    levels = (frame.maps.float().clamp(0, 1) * (GIF_LEVELS - 1)).round().to(torch.uint8).numpy()  # (L, H, T, T)
    n_tokens = levels.shape[-1]
    resample = Image.Resampling.NEAREST if cell >= n_tokens else Image.Resampling.BOX  # sharp cells, or averaged
    for layer, row in enumerate(levels):
        for head, grid in enumerate(row):
            tile = Image.fromarray(np.ascontiguousarray(grid), mode="L").resize((cell, cell), resample)
            image.paste(tile, (GIF_GAP_PX + head * (cell + GIF_GAP_PX),
                               GIF_CAPTION_PX + GIF_GAP_PX + layer * (cell + GIF_GAP_PX)))
    ImageDraw.Draw(image).text((GIF_GAP_PX, 3), f"step {frame.step:,}   (rows: layers, columns: heads)", fill=INK,
                               font=_caption_font())
    return image


@functools.lru_cache(maxsize=1)
def _caption_font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=GIF_CAPTION_PX - 8)  # Pillow's own font: no system fonts needed


def _gif_palette() -> list[int]:
    """GIF_LEVELS colours along BLUES, then the gaps' grey and the caption's ink: 256 RGB triples, flat."""
    anchors = np.array(BLUES, dtype=np.float64)  # (9, 3)
    at = np.linspace(0, len(BLUES) - 1, GIF_LEVELS)
    colours = np.stack([np.interp(at, np.arange(len(BLUES)), anchors[:, c]) for c in range(3)], axis=1)
    return [*colours.round().astype(int).flatten().tolist(), 209, 213, 219, 17, 24, 39]
