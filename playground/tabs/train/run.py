"""The Train tab's live run: what Train will do (the preview beside the buttons), the training
stream and its views (status, progress, loss chart, live sample, live attention), and Stop.

Every training takes round-robin turns with the others on the server (`core.schedule.FairShare`);
the live views run the model too, so they take turns like steps and spend at most a share of the
run's own compute (`VIEW_BUDGET`), refreshing less often on a crowded server.

`RunHandlers` is given the form's rules and a `keeper` (`restore`'s: what saves a run's state as it goes)
by `TrainHandlers` (`layout`).
Never imports the layout, the link or the checkpoints: they build on the run.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any

import gradio as gr
import torch

from core.attention import probe_induction
from core.config import GPTConfig, TrainConfig, stage_of
from core.data import CORPORA, DataError, TokenData, corpus_text, default_tokenizer, load_shakespeare
from core.model import GPT
from core.movie import AttentionMovie
from core.observers import AttentionProbe, Samples
from core.tokenizers import Tokenizer, token_labels, tokenizer_from_spec
from core.train import Trainer
from playground import validate, zerogpu
from playground.context import AppContext
from playground.figures.attention import live_heatmap
from playground.figures.training import loss_figure, note_plot
from playground.gradio_internals import plotly_json
from playground.pacing import STOP_WAIT_S, UI_INTERVAL_S, duration, slowdown
from playground.sessions import Problem, Session, TrainedModel, listed, missing_parts, training_bytes
from playground.tabs.train import compare
from playground.tabs.train.form import (
    BREAK_IT, MODEL_FIELDS, NORM_NAMES, FormRules, Recipe, TrainForm, takes_the_form,
)
from playground.tabs.train.replay import NO_SCORES, movie_for_run, movie_note, scores_plot, snapshot_due

# Live samples and attention maps run the model (a 120-token sample costs as much as several
# steps): each run spends at most this fraction of its training's own compute time on them (less
# on a crowded server, as refreshes slow down), so the steps keep the CPU.
VIEW_BUDGET = 0.15
NO_ATTENTION_YET = "Press Train: the attention of each head on a probe prompt appears here."
ATTENTION_INTERVAL_S = 0.5  # the heatmap grid is the heaviest payload (~150 KB for 6 x 8 heads): 2 a second
SAMPLE_INTERVAL_S = 2.0  # a fresh live sample costs sample_tokens forward passes
SCORES_INTERVAL_S = 2.0  # the head scores' chart gains a point a snapshot; redrawn at most this often (~60 ms a draw)
TRAINING_NOW = "Training now: **Stop** ends it and keeps what it has learned."
NO_MASK_SCORES = (" ⚠️ Each position also reads the tokens after it, the next one included: the loss and the answers "
                  "score copying, not predicting. The live sample, with no text after it to read, shows what it "
                  "can really write.")


# ------------------------------------------------------------------ corpus and tokens (cached, shared)


@functools.lru_cache(maxsize=8)
def _builtin_text(name: str) -> str:
    return corpus_text(name)  # Tiny Shakespeare downloads here on first use


@functools.lru_cache(maxsize=6)
def _builtin_tokens(name: str, tokenizer_spec: str, block_size: int) -> TokenData:
    """Built-in corpora are encoded once per tokenizer and shared (read-only) by all sessions."""
    return TokenData.from_text(_builtin_text(name), tokenizer_from_spec(json.loads(tokenizer_spec)), block_size,
                               answer_after=CORPORA[name].answer_after)


def _corpus_vocab_text(corpus: str) -> str | None:
    """A built-in corpus's text for previews, without downloading anything (None if not here yet)."""
    if corpus == "shakespeare":
        try:
            return _local_shakespeare()
        except DataError:
            return None
    return _builtin_text(corpus)


@functools.lru_cache(maxsize=1)
def _local_shakespeare() -> str:
    """Read and hash-checked once, not on every preview (each change of the form asks); a failure
    is not cached, so a later download is found."""
    return load_shakespeare(download=False)


class RunHandlers:
    """Train, New model, Stop and the preview: the handlers of a run."""

    def __init__(self, ctx: AppContext, rules: FormRules,
                 keeper: Callable[[Session, TrainForm, Recipe], Callable[[], None]]) -> None:
        self.ctx, self.registry, self.rules = ctx, ctx.registry, rules
        self.keeper = keeper  # what a run of (session, form, recipe) calls to keep the session's state

    @takes_the_form
    def preview(self, form: TrainForm, request: gr.Request | str | None) -> tuple[str, str | dict]:
        """(the parameter count of the model these settings describe, what Train will do with them, or gr.skip()
        while a run is on), shown as the form changes: the second beside the buttons, before anything is pressed."""
        try:
            recipe = self.rules.recipe(form)
            text = recipe.text if recipe.text is not None else _corpus_vocab_text(recipe.corpus)
            if text is None and recipe.tokenizer == "char":
                return "The parameter count appears once Tiny Shakespeare is downloaded (press **Train**).", ""
            tokenizer = default_tokenizer(recipe.tokenizer, text or "")
            config, _ = recipe.configs(tokenizer.vocab_size)
            counts = self.rules.check_size(config)
        except (gr.Error, ValueError) as error:  # shown as it is typed, not as an error
            return f"⚠️ {error.message if isinstance(error, gr.Error) else error}", ""
        parts = ", ".join(f"{label} {count:,}" for label, count in _count_parts(counts, config.norm) if count)
        count = f"**{counts['total']:,} parameters** ({parts}); vocabulary {config.vocab_size:,} tokens."
        session = self.registry.peek(request) if request is not None else None
        if session is not None and session.trainer is not None and session.trainer.running:
            # The run says so with each update and what comes next with its last. Said here too, a preview asked as
            # the run ended could land after that last update on a busy server and say "Training now" until the next.
            return count, gr.skip()
        return count, self._next_step(session, config, tokenizer, recipe.train["max_iters"])

    def _next_step(self, session: Session | None, config: GPTConfig, tokenizer: Tokenizer, steps: int) -> str:
        """What Train will do, once no run is on, with settings that describe `config`, `tokenizer` and `steps`."""
        if session is None or session.model is None:
            return "**Train** starts a new model with these settings."
        return (self._choice_needed(session, config, tokenizer, steps)
                or f"**Train** continues your model from step {session.trained.step}; **New model** starts afresh.")

    @takes_the_form
    def train(self, form: TrainForm, request: gr.Request | str):
        """Train the session's model with these settings (by default the copy task, 250 steps), streaming
        as it learns; continues the session's model while the settings still describe it.

        Returns:
            (status, progress HTML, loss chart, a sample of the model's text, attention map of the
            probe prompt, model_changed: a stamp the other tabs watch (the last one when training ends),
            the replay's note, the head scores chart, what Train will do next).
        """
        yield from self._noting_problems(self._train(form, request, new=False), request)

    @takes_the_form
    def train_new(self, form: TrainForm, request: gr.Request | str):
        """Like `train`, but discards the session's model first: a new one with these settings."""
        yield from self._noting_problems(self._train(form, request, new=True), request)

    def _noting_problems(self, updates, request: gr.Request | str):
        """`updates` (a run's stream), keeping on the session why it failed (a room's class view shows it):
        refused before its first update (a bad form, a full server, a job already running), or an error after."""
        started = False
        try:
            for update in updates:
                if not started:
                    started = True
                    self._note_problem(request, None)
                yield update
        except gr.Error as error:
            session = self.registry.peek(request)
            if session is not None and session.job_name is None:  # not refused for another job of its own
                session.train_problem = Problem(refused=not started, message=error.message)
            raise

    def _note_problem(self, request: gr.Request | str, problem: Problem | None) -> None:
        session = self.registry.peek(request)
        if session is not None:
            session.train_problem = problem

    def _train(self, form: TrainForm, request: gr.Request | str, new: bool):
        recipe = self.rules.recipe(form)
        with self.registry.job(request, "training") as session:
            session.stop_requested = False
            if recipe.corpus == "shakespeare" and _corpus_vocab_text("shakespeare") is None:
                yield self._update(session, status="Downloading Tiny Shakespeare (once, 1.1 MB)...")
            with validate.user_errors():
                text = recipe.text if recipe.text is not None else _builtin_text(recipe.corpus)
                tokenizer = default_tokenizer(recipe.tokenizer, text)
                config, train_config = recipe.configs(tokenizer.vocab_size)
            if new:
                _discard(session)
            # A choice to make is not an error: the status says what to do, and nothing else changes.
            choice = self._choice_needed(session, config, tokenizer, train_config.max_iters)
            if choice:
                yield self._update(session, status=choice)
                return
            trainer, until, note = self._prepare(session, recipe, text, tokenizer, config, train_config)
            yield from self._run(session, trainer, until, opening=note, keep=self.keeper(session, form, recipe))

    def _choice_needed(self, session: Session, config: GPTConfig, tokenizer: Tokenizer, steps: int) -> str:
        """Why Train cannot continue the session's model with these settings ('' when it can)."""
        if session.model is None:
            return ""
        problem = _mismatch(session.trained, config, tokenizer)
        if problem:
            return (f"⚠️ These settings describe a different model than the one you trained ({problem}). "
                    "Press **New model** to train one with them (yours is discarded), or change them back "
                    "and press **Train** to continue yours.")
        if session.trained.step >= steps:
            return (f"Your model has already trained {session.trained.step} of {steps} steps: raise **Steps** to train "
                    "it further, or press **New model** to start over.")
        return ""

    def _prepare(self, session: Session, recipe: Recipe, text: str, fresh: Tokenizer, config: GPTConfig,
                 train_config: TrainConfig) -> tuple[Trainer, int, str]:
        """The trainer to run: the session's model continued (`_choice_needed` said it can), or a new one."""
        session.pretrained = None  # Generate and Attention follow the model trained now, not GPT-2
        trained = session.trained
        if trained is not None:
            config = trained.model.config
        n_params = self.rules.check_size(config)["total"]
        if trained is None:
            self.registry.claim_model(session, training_bytes(n_params))
        with validate.user_errors():
            data = self._tokens(recipe, text, fresh, config.block_size)
            # a new model's weights come from the form's seed, like its batches: same seed, same run
            model = trained.model if trained is not None else GPT(
                config, generator=torch.Generator().manual_seed(train_config.seed))
            trainer = self.ctx.trainer(model, data, train_config, n_params, tokenizer=fresh)
        train_config = trainer.config  # on the device it trains on
        start = 0 if trained is None else trained.step
        state = None if trained is None else trained.training_state()
        if state is not None:  # optimizer, step, history, random states
            with validate.user_errors():
                trainer.load_state_dict(state)
        elif trained is not None:  # a checkpoint without a training state: its steps and curve go on
            trainer.step, trainer.history = start, list(trained.history)
        note = (f"Continuing from step {start}" if start else "Training a new model")
        movie = movie_for_run(trained.movie if trained is not None else None, trainer, train_config.max_iters)
        run = trained.run if trained is not None and trained.run else session.runs.new_number()
        session.trained = TrainedModel(model, fresh, recipe.corpus_title, trainer.history, trainer, train_config,
                                       movie=movie, run=run, task=recipe.task)
        return trainer, train_config.max_iters, note

    def _tokens(self, recipe: Recipe, text: str, tokenizer: Tokenizer, block_size: int) -> TokenData:
        if recipe.text is None:
            return _builtin_tokens(recipe.corpus, json.dumps(tokenizer.spec()), block_size)
        return TokenData.from_text(text, tokenizer, block_size)

    def _run(self, session: Session, trainer: Trainer, until: int, opening: str, keep: Callable[[], None]):
        """Stream the run's updates; the first (after the first step) says `opening` as its status.
        `keep` saves the session's state (to the store): at every evaluation and at the end."""
        # The first update goes out after the first step, with the chart alone: the first sample and
        # attention map wait their intervals (an untrained model shows noise, and drawing it would
        # delay the first chart).
        last_ui = 0.0
        last_sample = last_attention = time.monotonic()
        # Every update sends every output: Gradio rebuilds a component for each gr.skip() in a stream
        # (its config and schema: the costliest part of an update), while an unchanged value costs
        # an equality check. So the last sample, map and model description go out again.
        sample, attention = "", note_plot("The attention map appears after a few steps.")
        described, first = describe(session), True
        share, trained_before, viewing = self.ctx.share, trainer.elapsed, 0.0
        movie, scores, scored_step, last_scores = session.trained.movie, note_plot(NO_SCORES), None, 0.0
        note, noted = "", None  # the movie's note, and what it was written for
        tokenizer, probe = session.trained.tokenizer, AttentionProbe()  # the views, taken by the clock below
        samples, route = Samples(tokenizer), zerogpu.route(trainer)
        stacked = trainer.update == self.ctx.group.update  # stepping together, not in turns
        for event in zerogpu.run(trainer, until):
            if session.stop_requested:
                trainer.stop()
            now, sharing = time.monotonic(), self.ctx.trainings
            slower = slowdown(sharing, share.slots)
            if not first or event.done:  # a first update goes out before its snapshot (after the yield below)
                affordable = self._affordable(viewing, slower, trainer, trained_before)
                viewing += self._snapshot(movie, trainer, probe, event, affordable)
            if not event.error and event.val_loss is not None and not event.done:
                keep()  # encoded here, written by the store's thread: the next step does not wait for it
            if not event.done and now - last_ui < UI_INTERVAL_S * slower:
                continue
            last_ui = now
            self.registry.touch(session)
            if event.error:
                if movie is not None:  # the weights went back to an earlier step: so does the movie
                    movie.rewind(trainer.step)
                raise gr.Error(event.error)
            finished = event.done and not event.stopped  # a Stop ends at once: no fresh sample to wait for
            affordable = self._affordable(viewing, slower, trainer, trained_before)
            # on a crowded server these come rarer with the updates themselves: each costs the server a forward
            # pass and the page a draw (the live map ~90 ms of its main thread)
            sample_due = finished or (affordable and now - last_sample >= SAMPLE_INTERVAL_S * slower)
            attention_due = finished or (affordable and now - last_attention >= ATTENTION_INTERVAL_S * slower)
            if sample_due or attention_due:
                with share.turn(trainer) as granted:  # the model's work takes its turn like a step
                    started = time.perf_counter()
                    if granted and sample_due:
                        sample, last_sample = samples.sample(trainer), now
                        session.trained.sample = sample  # kept with the model: a page coming back shows it
                    if granted and attention_due:
                        attention, last_attention = self._attention_figure(trainer, probe, tokenizer), now
                    viewing += time.perf_counter() - started
            next_step = TRAINING_NOW
            if event.done:  # the run joins those kept to compare, before the store keeps them, the last sample too
                compare.record(session, token_labels(tokenizer, probe.probe_ids(trainer)))
                keep()
                described = describe(session)  # other tabs follow the model once the run ends
                # said with the status, not seconds later by the followers of the model (issue 36)
                trained = session.trained
                next_step = self._next_step(session, trained.model.config, trained.tokenizer, until)
            frames = [] if movie is None else movie.frames
            scores_due = event.done or now - last_scores >= SCORES_INTERVAL_S * slower
            if frames and frames[-1].step != scored_step and scores_due:  # a snapshot came since the last drawing
                scores, scored_step, last_scores = scores_plot(movie), frames[-1].step, now
            # written again only when the snapshots change: scoring the heads for every update took a tenth as
            # long as the training steps themselves (a profile of sixty learners training on two cores)
            shown = (len(frames), frames[-1].step if frames else None, frames[-1].probe is None if frames else None,
                     event.done)
            if shown != noted:
                note, noted = movie_note(movie, not event.done), shown
            where, why = (route.where(), route.refusal) if route is not None else ("", None)
            status = _status(event, sharing, opening if first else "Training", where, why, together=stacked)
            yield self._update(session, status=status, event=event, sample=sample, attention=attention,
                               model_changed=described, movie_note=note,
                               scores=scores, next_step=next_step)
            if first and not event.done:  # the trainer waits at this step: its snapshot now, as the page draws
                viewing += self._snapshot(movie, trainer, probe, event, affordable)
            first = False

    @staticmethod
    def _affordable(viewing: float, slower: float, trainer: Trainer, trained_before: float) -> bool:
        """Whether the run's views (samples, maps, snapshots) have spent less than their share of its compute."""
        return viewing <= VIEW_BUDGET / slower * (trainer.elapsed - trained_before)

    def _snapshot(self, movie: AttentionMovie | None, trainer: Trainer, probe: AttentionProbe, event,
                  affordable: bool) -> float:
        """Add this step's snapshot to the movie where one is due, in a turn like the live views'; the
        seconds it took (the view budget's)."""
        if movie is None or event.error or not snapshot_due(movie, event, affordable):
            return 0.0
        with self.ctx.share.turn(trainer) as granted:  # a snapshot is counted like the live views
            started = time.perf_counter()
            if granted or event.done:  # the last step always has its snapshot, a stopped run's too
                induction = probe_induction(trainer.model) if movie.probe_due(event.done) else None
                movie.add(event.step, probe.attention(trainer), induction)
            return time.perf_counter() - started

    def _attention_figure(self, trainer: Trainer, probe: AttentionProbe, tokenizer: Tokenizer):
        per_layer = probe.attention(trainer)  # per layer (H, T, T); none without attention
        if not per_layer:
            return note_plot("This stage has no attention yet: its tokens cannot look at each other.")
        figure = live_heatmap(torch.stack(per_layer), token_labels(tokenizer, probe.probe_ids(trainer)))
        return plotly_json(figure.to_json())  # serialised once, though sent with every update

    def _update(self, session: Session, *, status: str, event=None, sample=gr.skip(), attention=gr.skip(),
                model_changed=gr.skip(), movie_note=gr.skip(), scores=gr.skip(), next_step=gr.skip()) -> tuple:
        """(status, progress, loss figure, sample, attention, model_changed, movie note, head scores, what
        Train will do)."""
        history = [] if session.trained is None else session.trained.history
        config = None if session.trained is None else session.trained.model.config
        progress = progress_html(event, history, config) if event is not None else gr.skip()
        return (status, progress, loss_figure(history, event.max_iters if event else None), sample, attention,
                model_changed, movie_note, scores, next_step)

    def stop(self, request: gr.Request):
        """Stop this session's training after the current step; the weights are kept, and train goes on
        from them. Answers once the training has ended (or after STOP_WAIT_S), so its status is the last word.

        Returns:
            the status ("Stopped at step N ..."), or nothing when no training runs.
        """
        session = self.registry.peek(request)
        if session is None or session.job_name != "training":
            return gr.skip()  # nothing trains: leave the status ("Done: ...") as it is
        session.stop_work()
        deadline = time.monotonic() + STOP_WAIT_S
        while session.job_name == "training" and time.monotonic() < deadline:
            time.sleep(0.02)
        if session.job_name == "training":
            return "Stopping after this step; the weights learned so far are kept."
        return _stopped_status(session.trained.step)


def _mismatch(trained: TrainedModel, config: GPTConfig, tokenizer: Tokenizer) -> str:
    """What differs between the trained model and the one the settings describe ('' if nothing)."""
    current = trained.model.config
    diffs = [_field_change(f, getattr(current, f), getattr(config, f)) for f in MODEL_FIELDS
             if getattr(current, f) != getattr(config, f)]
    if stage_of(current) != stage_of(config):
        diffs.append(f"stage {stage_of(current) or 'custom'} → {stage_of(config) or 'custom'}")
    ours, theirs = trained.tokenizer.spec(), tokenizer.spec()
    if ours != theirs:
        diffs.append(
            f"tokenizer {ours['kind']} → {theirs['kind']}" if ours["kind"] != theirs["kind"]
            else f"another corpus: vocabulary of {trained.tokenizer.vocab_size} → {tokenizer.vocab_size} characters"
        )
    return "; ".join(diffs)


def _field_change(field: str, before: Any, after: Any) -> str:
    """'n_head 2 → 4', or for a break-it switch 'Causal mask on → off'."""
    if field in BREAK_IT:
        return f"{BREAK_IT[field][0]} {'on' if before else 'off'} → {'on' if after else 'off'}"
    def shown(value: Any) -> str:
        return "off" if value is None else str(value)  # an option left out (no window, one key/value head each)
    return f"{field} {shown(before)} → {shown(after)}"


def describe(session: Session) -> str:
    """One line about the session's model, shown by other tabs ('' when there is none)."""
    return "" if session.trained is None else session.trained.describe()


def _count_parts(counts: dict[str, int], norm: str) -> list[tuple[str, int]]:
    """The parameter count's parts, which add up to its total (a tied head counts once)."""
    return [
        ("token embedding", counts["token_embedding"]), ("position embedding", counts["position_embedding"]),
        ("attention", counts["attention"]), ("feed-forward", counts["feed_forward"]),
        (NORM_NAMES[norm] + "s", counts["block_layer_norms"] + counts["final_layer_norm"]), ("LM head", counts["lm_head"]),
    ]


def _stopped_status(step: int) -> str:
    return f"Stopped at step {step}. The weights are kept: press **Train** to continue."


def _discard(session: Session) -> None:
    """Forget the session's model and everything that came with it."""
    session.trained = None
    session.last_text, session.last_steps = "", []


def _status(event, sharing: int = 1, doing: str = "Training", where: str = "", refused: str | None = None,
            together: bool = False) -> str:
    """What the run is `doing` ("Training a new model" on its first update); `where` it trains when that
    is news (ZeroGPU's GPU, or the CPU after ZeroGPU `refused` it, saying why), else while others train
    too, how many share the server (stepping `together`, or taking turns); and the time left."""
    if event.stopped:
        return _stopped_status(event.step)
    if event.done:
        val = f", validation loss {event.val_loss:.3f}" if event.val_loss is not None else ""
        return f"Done: {event.step} steps, training loss {event.train_loss:.3f}{val}."
    if where:
        why = f" ZeroGPU refused the GPU: {refused}" if refused else ""
        return f"{doing} {where}; about {duration(event.eta)} left.{why}"
    if sharing > 1:
        how = "the models of the same shape stepping together" if together else "taking turns step by step"
        return f"{doing}: {sharing} trainings share this server, {how}; about {duration(event.eta)} left."
    return "Training..." if doing == "Training" else f"{doing}."


def progress_html(event, history: list[dict] = (), config: GPTConfig | None = None) -> str:
    """The progress bar and the run's figures; for a task corpus, how well it writes the answers
    (the whole-line loss has a floor there: the questions are random); what the model (`config`) was
    built without, and why a model without the causal mask scores so well."""
    scored = next((row for row in reversed(history) if row.get("answer_accuracy") is not None), None)
    answers = ("" if scored is None else
               f"<span class='answers'>Answers (the half of each line that can be learned), validation: "
               f"<b>{scored['answer_accuracy']:.0%} right</b>, loss {scored['answer_loss']:.3f} "
               f"at step {scored['step']:,}.</span>")
    missing = [] if config is None else missing_parts(config)
    built = "" if not missing else (
        f"<span class='built'>Built without {listed(['the ' + part for part in missing])}."
        f"{NO_MASK_SCORES if config.use_attention and not config.causal else ''}</span>")
    if event is None and not history:
        return "<div class='train-progress'><div class='bar'><div style='width:0%'></div></div><span>Not trained yet.</span></div>"
    if event is None:  # a model loaded (an upload, or brought back): where its curve ends
        last, evaluated = history[-1], next((row for row in reversed(history) if row.get("val_loss") is not None), {})
        val = f" · val {evaluated['val_loss']:.3f}" if evaluated else ""
        return (f"<div class='train-progress'><div class='bar'><div style='width:100%'></div></div>"
                f"<span>step {last['step']:,} (loaded) · loss {last['train_loss']:.3f}{val}</span>{answers}{built}</div>")
    percent = 100.0 * event.step / max(1, event.max_iters)
    val = f" · val {event.val_loss:.3f}" if event.val_loss is not None else ""
    left = "" if event.done else f" · {duration(event.eta)} left"
    return (
        f"<div class='train-progress'><div class='bar'><div style='width:{percent:.1f}%'></div></div>"
        f"<span>step {event.step:,} / {event.max_iters:,} · loss {event.train_loss:.3f}{val} · "
        f"{event.tokens_per_sec:,.0f} tokens/s{left}</span>{answers}{built}</div>"
    )
