"""The attention movie on the Train tab: the probe's attention recorded while a run trains, its
replay (a slider, Play and Pause), each head's pattern scores over training, /attention_movie as
JSON and the movie as a GIF to download.

The run records the snapshots (`movie_for_run`, `snapshot_due`); the handlers here only read them.
`ReplayHandlers` is given the session's download folder (for the GIF) by `TrainHandlers` (`layout`).
Never imports the run, the checkpoints or the layout: they build on the replay.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gradio as gr

from core.attention import STRONG_PATTERN, induction_heads, induction_verdict_scores
from core.movie import INDUCTION, MOVIE_BYTES, AttentionMovie, evenly, induction_onset, movie_gif
from core.observers import default_probe
from core.tokenizers import Tokenizer, token_labels
from core.train import Trainer
from playground import validate
from playground.context import AppContext
from playground.figures.attention import replay_heatmap
from playground.figures.training import head_scores_plot, note_plot
from playground.gradio_internals import PlotData, plotly_json
from playground.sessions import Session

# The attention movie: a snapshot every max_iters // MOVIE_FRAMES steps (and at the last step), so a run
# has up to about this many; past MOVIE_BYTES the movie keeps every other one and records half as often.
MOVIE_FRAMES = 80
NO_MOVIE = "Press **Train**: the attention on the probe prompt is recorded as the model learns, to replay here."
NO_REPLAY = "Train a model, then drag the slider to replay its attention over training."
NO_SCORES = "Each head's pattern scores over training appear here."
JSON_PER_VALUE = 7  # characters of a map value in /attention_movie's JSON: "0.123, "
PLAY, PAUSE = "▶ Play", "⏸ Pause"
PLAY_INTERVAL_S = 0.4  # one snapshot after another: 80 snapshots play in about half a minute


class ReplayHandlers:
    """The replay's slider, Play and Pause, /attention_movie and the GIF."""

    def __init__(self, ctx: AppContext, folder: Callable[[Session], Path]) -> None:
        self.registry, self._folder = ctx.registry, folder

    def replay(self, step, request: gr.Request) -> PlotData:
        """The attention grid of the snapshot nearest to training `step`, at or before it (a note when
        the session's model has none: the slider also moves after a run without attention)."""
        step = validate.number(step, "Replay step", 0)
        movie, frames = self._recorded(request)
        if not frames:
            return note_plot(NO_REPLAY)
        frame = next((f for f in reversed(frames) if f.step <= step), frames[0])
        labels = token_labels(self._tokenizer_of(request), movie.probe_ids)
        return plotly_json(replay_heatmap(frame.maps.float(), labels, frame.step).to_json())

    def movie_range(self, request: gr.Request):
        """The replay slider spanning the recorded steps (while a run records more)."""
        return self._slider(request, to_last=False)

    def movie_after_run(self, request: gr.Request):
        """The replay slider spanning the recorded steps, on the last one."""
        return self._slider(request, to_last=True)

    def _slider(self, request: gr.Request | str, to_last: bool):
        _, frames = self._recorded(request)
        if not frames:
            return gr.update(maximum=1, value=0) if to_last else gr.skip()
        last = frames[-1].step
        return gr.update(maximum=last, value=last) if to_last else gr.update(maximum=last)

    def play(self, playing: bool, step, request: gr.Request) -> tuple:
        """Play or pause the replay: (playing, the timer, the button, the slider: back to the start if
        it stood at the end)."""
        if playing:
            return False, gr.Timer(active=False), PLAY, gr.skip()
        step = validate.number(step, "Replay step", 0)
        _, frames = self._movie_of(request)
        return True, gr.Timer(active=True), PAUSE, (0 if step >= frames[-1].step else gr.skip())

    def advance(self, step, request: gr.Request) -> tuple:
        """The timer's tick: (the slider on the next snapshot, playing, the timer, the button); after
        the last snapshot the replay pauses."""
        step = validate.number(step, "Replay step", 0)
        _, frames = self._recorded(request)  # none: a New model discarded the movie while it played
        later = next((frame.step for frame in frames if frame.step > step), None)
        if later is not None:
            return later, gr.skip(), gr.skip(), gr.skip()
        return gr.skip(), False, gr.Timer(active=False), PLAY

    def attention_movie(self, request: gr.Request) -> dict:
        """The session's attention over training: the probe's tokens, every snapshot's step, and per
        snapshot the (layer, head, query, key) maps rounded to 3 decimals with each head's pattern scores on
        the probe and its induction score (random tokens written twice; 0 in layer 0, null if not measured).
        Evenly thinned (the first and last kept) so the maps' JSON stays under the movie's memory cap."""
        movie, frames = self._movie_of(request)
        per_frame = frames[0].maps.numel() * JSON_PER_VALUE
        kept = evenly(frames, max(2, movie.max_bytes // per_frame))
        return {
            "probe_tokens": token_labels(self._tokenizer_of(request), movie.probe_ids),
            "steps": [frame.step for frame in kept], "recorded": len(frames), "bytes": movie.nbytes,
            "max_bytes": movie.max_bytes,
            # in double precision, so 0.123 is written as 0.123 and not as float32's 0.12300000339746475
            "frames": [{"step": frame.step, "maps": frame.maps.double().round(decimals=3).tolist(),
                        "scores": {name: None if score is None else score.double().round(decimals=3).tolist()
                                   for name, score in _scores(frame).items()}} for frame in kept],
        }

    def movie_gif(self, request: gr.Request) -> str:
        """The session's attention movie as an animated GIF file to download."""
        with self.registry.job(request, "making the movie's GIF") as session:
            movie = None if session.trained is None else session.trained.movie
            if movie is None or not movie.frames:
                raise gr.Error("There is no attention movie yet: press Train (with a stage that has attention) to "
                               "record one.")
            path = self._folder(session) / f"attention-movie-step{movie.frames[-1].step}.gif"
            path.parent.mkdir(parents=True, exist_ok=True)
            for old in path.parent.glob("attention-movie-*.gif"):  # only the latest GIF of a session is kept
                old.unlink()
            path.write_bytes(movie_gif(movie))
            return str(path)

    def _recorded(self, request: gr.Request | str) -> tuple[AttentionMovie | None, list]:
        """The session's movie (or None) and its frames: a list as they are now, while a run adds more."""
        session = self.registry.peek(request)
        movie = None if session is None or session.trained is None else session.trained.movie
        return movie, [] if movie is None else movie.frames

    def _movie_of(self, request: gr.Request | str) -> tuple[AttentionMovie, list]:
        """The session's movie and its frames, or a gr.Error saying what to do."""
        movie, frames = self._recorded(request)
        if not frames:
            raise gr.Error("There is no attention movie yet: press Train on the Train tab (with a stage that has "
                           "attention), and the attention is recorded as the model learns.")
        return movie, frames

    def _tokenizer_of(self, request: gr.Request | str) -> Tokenizer:
        return self.registry.peek(request).trained.tokenizer


def movie_for_run(movie: AttentionMovie | None, trainer: Trainer, until: int) -> AttentionMovie | None:
    """The run's attention movie: the model's own, continued, or a new one; None where the model has no
    attention or one snapshot of it would not fit the movie's memory."""
    config, probe_ids = trainer.model.config, default_probe(trainer)
    if not config.use_attention or config.n_layer == 0:
        return None
    if 2 * config.n_layer * config.n_head * len(probe_ids) ** 2 > MOVIE_BYTES:  # float16 maps
        return None
    if movie is None or movie.probe_ids != probe_ids:
        movie = AttentionMovie(probe_ids, max_bytes=MOVIE_BYTES)
    movie.every = max(movie.every, until // MOVIE_FRAMES, 1)  # a longer run: rarer snapshots
    return movie


def snapshot_due(movie: AttentionMovie, event, affordable: bool) -> bool:
    """Whether to record this step: `movie.every` steps after the last snapshot, or as soon after as the
    view budget allows; and always the last step (once, again where its snapshot came before the run
    ended and was not probed: the last snapshot carries the replay's induction verdict)."""
    last = movie.frames[-1] if movie.frames else None
    if last is not None and last.step == event.step:
        return event.done and last.probe is None
    return event.done or (affordable and (last is None or event.step - last.step >= movie.every))


def movie_note(movie: AttentionMovie | None, recording: bool) -> str:
    """What the movie holds (the steps it covers: a snapshot is skipped while the view budget is spent,
    so there may be fewer than one every `movie.every` steps), and its memory bound; then the head
    scores chart and the live map in words (their text equivalent, beside them)."""
    if movie is None:
        return "This model has no attention to record."
    frames, every = movie.frames, "step" if movie.every == 1 else f"{movie.every} steps"
    count = f"{len(frames)} snapshot{'s' if len(frames) != 1 else ''}"
    span = f" of steps {frames[0].step}–{frames[-1].step}" if len(frames) > 1 else ""
    return (f"{'Recording' if recording else 'Replay'}: {count}{span} (at most one every {every}; fewer while "
            f"taking them would slow the training), {movie.nbytes / 1024:,.1f} KB of at most "
            f"{movie.max_bytes / 2**20:g} MiB.{scores_summary(movie)}")


def _scores(frame) -> dict:
    """A snapshot's scores as the chart draws them: the probe text's patterns, then the induction verdict's."""
    return {**frame.scores, INDUCTION: None if frame.probe is None else induction_verdict_scores(frame.probe)}


def scores_summary(movie: AttentionMovie) -> str:
    """The strongest head of each pattern scored on the probe text at the last snapshot, where one scores
    enough to be named (STRONG_PATTERN, as the Attention tab names heads), the patterns no head shows, and
    which heads are induction heads, by the Attention tab's rule (`induction_heads`), since what step: ''
    before the first snapshot."""
    if not movie.frames:
        return ""
    last, strongest, absent = movie.frames[-1], [], []
    for pattern, scores in _scores(last).items():
        if pattern == INDUCTION or scores is None or not scores.isfinite().any():  # a diverged model
            continue
        layer, head = divmod(int(scores.nan_to_num(-1.0).argmax()), scores.size(1))
        if float(scores[layer, head]) >= STRONG_PATTERN:
            strongest.append(f"{pattern} L{layer} H{head} ({float(scores[layer, head]):.2f})")
        else:
            absent.append(pattern)
    at = f" at step {last.step:,}"
    heads = f" Each pattern's strongest head{at}: {', '.join(strongest)}." if strongest else ""
    if absent:
        heads += (f" No head{at if not strongest else ''} shows a {' or '.join(absent)} pattern (every score "
                  f"under {STRONG_PATTERN:g}).")
    return heads + _induction_summary(movie)


def _induction_summary(movie: AttentionMovie) -> str:
    """Which heads are induction heads at the newest probed snapshot, as the Attention tab's probe finds them."""
    probed = movie.last_probed()
    if probed is None:
        return " Induction untested: the context is too short for the probe (random tokens written twice)."
    found, when = induction_heads(probed.probe), f" at step {probed.step:,}"
    if not found:
        return (f" No induction head{when}: no head past layer 0 follows the repeats in random tokens written "
                "twice (a head that only looks back a fixed distance can match the probe text's own repeats).")
    heads = ", ".join(f"L{layer} H{head} ({float(probed.probe[layer, head]):.2f})" for layer, head in found)
    return (f" Induction heads{when}, by the probe (random tokens written twice): {heads}; one formed at step "
            f"{induction_onset(movie):,}.")


def scores_plot(movie: AttentionMovie) -> PlotData:
    """Each head's pattern scores over the movie's snapshots, serialised once for the run's stream."""
    return head_scores_plot(movie.curves(), induction_onset(movie))
