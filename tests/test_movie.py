"""The attention movie: snapshots in bounded memory, scores per snapshot, the induction onset."""

import pytest
import torch

from core.config import GPTConfig
from core.attention import STRONG_PATTERN, is_induction_head, pattern_scores
from core.movie import INDUCTION, MOVIE_BYTES, SCORED, AttentionMovie, decode_movie, encode_movie, induction_onset
from support.movies import PROBE, H, L, T, uniform, with_induction_head


def probe(score: float = 0.9, layer: int = 1, head: int = 2) -> torch.Tensor:
    """(L, H) induction scores on random tokens written twice: 0.1 everywhere but `score` at one head."""
    scores = torch.full((L, H), 0.1)
    scores[layer, head] = score
    return scores


def test_memory_stays_under_the_budget_and_the_movie_spans_the_whole_run():
    frame_bytes = L * H * T * T * 2  # float16
    movie = AttentionMovie(PROBE, every=1, max_bytes=10 * frame_bytes)
    for step in range(1, 201):
        if movie.wants(step) or step == 200:  # the last step always has its snapshot
            movie.add(step, list(uniform()))  # per-layer maps, as core.observers.AttentionProbe gives them
        assert movie.nbytes <= movie.max_bytes
    steps = [frame.step for frame in movie.frames]
    assert steps[0] == 1 and steps[-1] == 200  # the first and the newest snapshots survive thinning
    assert len(steps) >= 5 and steps == sorted(steps)
    assert movie.every > 1  # snapshots are taken less often once memory filled
    assert movie.frames[0].maps.dtype == torch.float16


def test_a_snapshot_larger_than_the_budget_is_refused():
    with pytest.raises(ValueError, match="bytes"):
        AttentionMovie(PROBE, max_bytes=100).add(1, uniform())


def test_scores_follow_the_heads_and_the_onset_is_when_the_probe_finds_an_induction_head():
    """The onset is the Attention tab's verdict (random tokens written twice, past layer 0) lasting to the end."""
    movie = AttentionMovie(PROBE)
    for step in range(1, 11):
        formed = step in (3, 6, 7, 8, 9, 10)
        movie.add(step, with_induction_head() if formed else uniform(), probe(0.9 if formed else 0.2))
    steps, induction = movie.induction_curve()
    assert steps == list(range(1, 11)) and induction.shape == (10, L, H)
    assert induction[5, 1, 2] == pytest.approx(0.9) and induction[0, 1, 2] == pytest.approx(0.2)
    assert not induction[:, 0].any()  # layer 0 scores 0: no head there can be one
    assert induction_onset(movie) == 6  # step 3's flash does not count: it did not last
    previous = movie.score_curve("previous-token")[1]
    assert previous.max() < 0.05
    assert list(movie.curves()) == [*SCORED, INDUCTION]


def test_the_probe_texts_own_repeats_are_no_evidence_of_an_induction_head():
    """The copy task's case: on a text that repeats with one period a head that looks back a fixed distance
    lands where an induction head would; on random tokens written twice it does not: no induction head."""
    movie = AttentionMovie(PROBE)
    for step in (1, 2, 3):
        movie.add(step, with_induction_head(), probe(0.1))
    text_scores = pattern_scores(movie.frames[-1].maps.float(), PROBE)["induction"][1]
    assert text_scores[1, 2] > STRONG_PATTERN  # the probe text alone would say induction
    assert induction_onset(movie) is None and movie.induction_curve()[1].max() < STRONG_PATTERN


def test_no_onset_without_a_head_past_layer_zero():
    movie = AttentionMovie(PROBE)
    movie.add(1, with_induction_head(layer=0), probe(0.95, layer=0))  # layer 0 cannot compose with an earlier head
    assert induction_onset(movie) is None and not is_induction_head(0, 0.95)
    assert movie.induction_curve()[1][0, 0].max() == 0  # its 0.95 counts for nothing
    unmeasured = AttentionMovie(PROBE)
    unmeasured.add(1, with_induction_head())  # no probe scores (a context too short for the probe)
    assert induction_onset(unmeasured) is None and unmeasured.induction_curve() is None
    with pytest.raises(ValueError, match="pattern"):
        movie.score_curve("mirror")
    with pytest.raises(ValueError, match="probe scores"):
        movie.add(2, uniform(), torch.zeros(L, H + 1))


def test_the_gif_has_a_frame_per_snapshot_in_the_apps_colours():
    import io

    from PIL import Image

    from core.movie import GIF_WIDTH_PX, movie_gif

    movie = AttentionMovie(PROBE)
    movie.add(10, uniform())
    movie.add(20, with_induction_head(layer=1, head=2))
    with pytest.raises(ValueError, match="no snapshots"):
        movie_gif(AttentionMovie(PROBE))
    image = Image.open(io.BytesIO(movie_gif(movie)))
    assert image.format == "GIF" and image.n_frames == 2 and image.size[0] <= GIF_WIDTH_PX
    assert image.size[0] < image.size[1] * 2  # 3 heads wide, 2 layers high (and a caption)
    image.seek(1)
    last = image.convert("RGB")
    # weight 1 is the darkest blue: every row of the induction head (head 2, the last column) has it,
    # only the first row of a uniform head (which sees one token)
    darkest = (8, 48, 107)
    width, height = last.size
    dark = [sum(last.getpixel((x, y)) == darkest for y in range(height)) for x in range(width)]
    first_head, last_head = sum(dark[: width // 3]), sum(dark[2 * width // 3:])
    assert last_head > 5 * first_head > 0


def test_a_movie_of_thousands_of_tiny_snapshots_makes_a_bounded_gif():
    import io

    from PIL import Image

    from core.movie import GIF_MAX_FRAMES, evenly, movie_gif

    movie = AttentionMovie([1, 2])  # a 2-token probe: each snapshot is 8 bytes, so the budget holds thousands
    for step in range(1, 3001):
        movie.add(step, torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]]))
    assert len(movie.frames) == 3000
    with Image.open(io.BytesIO(movie_gif(movie))) as gif:
        assert gif.n_frames == GIF_MAX_FRAMES
    kept = evenly(movie.frames, GIF_MAX_FRAMES)
    assert (kept[0].step, kept[-1].step) == (1, 3000) and len(kept) == GIF_MAX_FRAMES


# ---------------------------------------------------------------- kept beside the model (the state store)

CONFIG = GPTConfig(vocab_size=10, block_size=16, n_layer=L, n_head=H, n_embd=12)


def recorded() -> AttentionMovie:
    movie = AttentionMovie(PROBE, every=5, max_bytes=MOVIE_BYTES)
    for step in (5, 10, 15):
        movie.add(step, uniform() if step < 15 else with_induction_head(), probe(0.2 if step < 15 else 0.9))
    return movie


def test_a_movie_comes_back_as_it_was_with_its_scores():
    movie = recorded()
    back = decode_movie(encode_movie(movie), CONFIG)
    assert (back.probe_ids, back.every, back.max_bytes) == (PROBE, 5, MOVIE_BYTES)
    assert [f.step for f in back.frames] == [5, 10, 15]
    for ours, theirs in zip(back.frames, movie.frames):
        assert torch.equal(ours.maps, theirs.maps)
        assert all(torch.equal(ours.scores[k], theirs.scores[k]) for k in theirs.scores if theirs.scores[k] is not None)
        assert torch.equal(ours.probe, theirs.probe)
    assert induction_onset(back) == induction_onset(movie) == 15


def test_a_movie_stored_before_the_probe_scores_were_kept_comes_back_untested():
    data = damaged()  # maps and steps only, as the state store kept movies before
    back = decode_movie(data, CONFIG)
    assert [f.step for f in back.frames] == [5, 10, 15] and all(f.probe is None for f in back.frames)
    assert induction_onset(back) is None
    movie = recorded()
    movie.frames[0] = type(movie.frames[0])(5, movie.frames[0].maps, movie.frames[0].scores)  # one not measured
    back = decode_movie(encode_movie(movie), CONFIG)
    assert back.frames[0].probe is None and torch.equal(back.frames[2].probe, movie.frames[2].probe)


def damaged(**changes) -> bytes:
    """A movie's bytes with `maps`, `steps` or metadata replaced."""
    from safetensors.torch import save

    movie = recorded()
    tensors = {"maps": torch.stack([f.maps for f in movie.frames]), "steps": torch.tensor([5, 10, 15])}
    metadata = {"probe_ids": str(PROBE), "every": "5", "max_bytes": str(MOVIE_BYTES)}
    for key, value in changes.items():
        (tensors if key in tensors or key in ("extra", "probe") else metadata)[key] = value
    return save(tensors, metadata=metadata)


@pytest.mark.parametrize("data, config, message", [
    (damaged(), GPTConfig(vocab_size=10, block_size=16, n_layer=L, n_head=H + 1, n_embd=12), "not a 2-layer, 4-head"),
    (damaged(), GPTConfig(vocab_size=8, block_size=16, n_layer=L, n_head=H, n_embd=12), "vocabulary and context"),
    (damaged(), GPTConfig(vocab_size=10, block_size=8, n_layer=L, n_head=H, n_embd=12), "vocabulary and context"),
    (damaged(steps=torch.tensor([5, 15, 10])), CONFIG, "do not go up"),
    (damaged(steps=torch.tensor([5, 10])), CONFIG, "a step each"),
    (damaged(maps=torch.full((3, L, H, T, T), float("nan"), dtype=torch.float16)), CONFIG, "between 0 and 1"),
    (damaged(maps=torch.ones(3, L, H, T, T)), CONFIG, "float16 maps"),
    (damaged(extra=torch.zeros(1)), CONFIG, "float16 maps"),
    (damaged(probe=torch.zeros(3, L, H + 1)), CONFIG, "probe scores are not float32"),
    (damaged(probe=torch.zeros(3, L, H, dtype=torch.float16)), CONFIG, "probe scores are not float32"),
    (damaged(probe=torch.full((3, L, H), 2.0)), CONFIG, "not all between 0 and 1"),
    (damaged(probe_ids="[5, 6]"), CONFIG, "vocabulary and context"),
    (damaged(every="0"), CONFIG, "out of bounds"),
    (damaged(max_bytes=str(10 * MOVIE_BYTES)), CONFIG, "out of bounds"),
    (damaged()[:-100], CONFIG, "damaged"),
    (b"\x00" * (MOVIE_BYTES * 2), CONFIG, "at most"),
])
def test_a_damaged_movie_is_refused_by_name(data, config, message):
    with pytest.raises(ValueError, match=message):
        decode_movie(data, config)


def test_rewind_forgets_the_snapshots_after_a_step():
    movie = recorded()
    movie.rewind(12)
    assert [f.step for f in movie.frames] == [5, 10]
    movie.add(12, uniform())  # the steps go up again from there: a movie that encodes and decodes
    assert [f.step for f in decode_movie(encode_movie(movie), CONFIG).frames] == [5, 10, 12]
