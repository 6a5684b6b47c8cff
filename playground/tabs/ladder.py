"""Ladder tab: the seeds' ladder in one click. Every stage from the bigram to the GPT trains in turn
on Tiny Shakespeare at the lecture's sizes; their validation curves overlay, and a table sets each
rung's loss beside the figure Karpathy's lecture prints.

Climb (api `/ladder`) runs under the session's job lock, as a training (it shares the Train tab's
concurrency id, limit and turns), and keeps its `core.ladder.Ladder` in `session.ladder`; Stop
(`/ladder_stop`) ends the rung in training after its current step. Tiny Shakespeare is read once
per process and its tokens are shared, read-only, by every session's ladder.

Never imports another tab: the pacing it shares with the Train tab is `playground.pacing`.
"""

from __future__ import annotations

import threading
import time

import gradio as gr
import pandas as pd
import torch

from core.data import DataError, TokenData, load_shakespeare
from core.ladder import LECTURE_MODEL, LECTURE_TRAIN, RUNGS, SCHEDULES, Ladder, LadderEvent, ladder_configs, ladder_data
from core.schedule import FairShare
from core.model import GPT
from core.tokenizers import Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures.ladder import ladder_figure
from playground.gradio_internals import PlotData
from playground.live_plot import LivePlot
from playground.pacing import STOP_WAIT_S, UI_INTERVAL_S, duration, slowdown
from playground.sessions import training_bytes

# 3,000 steps: every rung in about two to three minutes on a 2-core server. The lecture's constant
# learning rate needs 10,000 for attention to pay, so the tab climbs with the short schedule.
MIN_STEPS, MAX_STEPS, DEFAULT_STEPS, STEP_SIZE = 100, 10_000, 3000, 100
DEFAULT_SEED = 1337
SCHEDULE = SCHEDULES["short"]
# Validation batches per estimate: a quarter of the lecture's 200. Each rung makes 20 estimates
# (core.ladder.CURVE_POINTS); at the default steps, 200 batches would add about a third to every
# rung's time on a shared server, 50 add 6-8% (measured on one core).
EVAL_ITERS = 50
# A climb holds one rung's model at a time: the largest rung's, on Tiny Shakespeare's 65 characters
with torch.device("meta"):
    LADDER_PARAMS = max(GPT(ladder_configs(stage, 65)[0]).parameter_counts()["total"] for stage in RUNGS)
LADDER_BYTES = training_bytes(LADDER_PARAMS)
JOB = "the ladder"  # the session's job while it climbs, as "already running ..." names it
# The table's columns and their widths: the numbers never break, and on a phone the first three (the
# rung, its loss and the lecture's) fit on the screen; the table scrolls sideways for the rest.
COLUMNS = ("rung", "val loss", "lecture", "change", "params", "time (s)")
COLUMN_WIDTHS = ("150px", "88px", "80px", "76px", "76px", "84px")
PENDING, TRAINING, NOT_REACHED = "pending", "training...", "not reached"

INTRO = (
    "Karpathy's *Let's build GPT* lecture adds one idea at a time to a bigram model and prints the validation "
    "loss after each. Here each rung is one of those models, trained in turn on Tiny Shakespeare at the lecture's "
    f"sizes ({LECTURE_MODEL['n_embd']} channels, {LECTURE_MODEL['n_head']} heads, context "
    f"{LECTURE_MODEL['block_size']}, batches of {LECTURE_TRAIN['batch_size']}; one layer until residual "
    f"connections, then {LECTURE_MODEL['n_layer']} blocks), all from the same seed on the same batches, then once "
    f"more with today's parts. The learning rate falls from {SCHEDULE['learning_rate']:g} to {SCHEDULE['min_lr']:g}: "
    f"the lecture's constant {LECTURE_TRAIN['learning_rate']:g} needs more steps than a climb here takes. "
    "**Look for:** position embeddings alone cannot help (a token knows where it sits but cannot look at the "
    "others yet); attention, more heads and the feed-forward each lower the loss; residual connections let blocks "
    "stack and lower it most; today's parts lower it again at the same size."
)
# The rungs, and why the lecture's figures are a guide rather than a target.
RUNG_NOTES = "\n".join(f"{i}. **{stage.title}**: {stage.description}" for i, stage in enumerate(RUNGS.values(), 1)) + (
    "\n\nWithout residual connections, stacked layers do not train: the rungs before them are one layer, as in "
    "the lecture. The lecture's figures come from 5,000 steps at a context of 8 and batches of 32: compare the "
    "shape of the ladder, not the third decimal."
)


# ------------------------------------------------------------------ Tiny Shakespeare (once per process)

_SHAKESPEARE_LOCK = threading.Lock()  # the first climbs wait for one load instead of each loading it
_shakespeare: tuple[Tokenizer, TokenData] | None = None


def shakespeare_data() -> tuple[Tokenizer, TokenData]:
    """Tiny Shakespeare as every rung trains on it, read (downloaded on first use) once per process and
    shared read-only by every session's ladder; core.data.DataError when it cannot be had (offline)."""
    global _shakespeare
    with _SHAKESPEARE_LOCK:
        if _shakespeare is None:  # a failure is not kept: a later climb tries again
            _shakespeare = ladder_data(load_shakespeare())
        return _shakespeare


def new_ladder(tokenizer: Tokenizer, data: TokenData, steps: int = DEFAULT_STEPS, seed: int = DEFAULT_SEED,
               share: FairShare | None = None, device: str = "auto") -> Ladder:
    """The climb the tab runs (tests/bench/bench_modern.py measures this one)."""
    return Ladder(tokenizer, data, steps, seed, share=share, eval_iters=EVAL_ITERS, schedule=SCHEDULE, device=device)


# ------------------------------------------------------------------ handlers


class LadderHandlers:
    """The tab's event handlers as plain methods (tests call them with a session id as request)."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.max_steps = min(MAX_STEPS, ctx.settings.max_iters)
        self.min_steps = min(MIN_STEPS, self.max_steps)

    def inputs(self, steps, seed) -> tuple[int, int]:
        """(steps per rung, seed), checked on the server: the slider is no guarantee."""
        s = self.ctx.settings
        cap = s.cap_hint("max_iters") if s.max_iters < MAX_STEPS else ""  # only when the server's cap binds
        return (validate.integer(steps, "Steps per rung", self.min_steps, self.max_steps, cap=cap),
                validate.integer(seed, "Seed", 0, 2**31 - 1))

    def climb(self, steps, seed, request: gr.Request):
        """Stream the climb: (status, curves, table), a few times a second and at every rung's end."""
        steps, seed = self.inputs(steps, seed)
        registry, share = self.ctx.registry, self.ctx.share
        with registry.job(request, JOB) as session:
            registry.claim_model(session, LADDER_BYTES)
            session.ladder, session.stop_requested = None, False  # a new climb: the last one is forgotten
            if _shakespeare is None:
                yield ("Loading Tiny Shakespeare (downloaded once, 1.1 MB, if this server has no copy)...",
                       gr.skip(), gr.skip())
            try:
                tokenizer, data = shakespeare_data()
            except DataError as error:  # offline without a copy: said where it stays, the table and chart kept
                yield f"⚠️ **The ladder needs Tiny Shakespeare, and this server has no copy.** {error}", gr.skip(), gr.skip()
                return
            ladder = session.ladder = new_ladder(tokenizer, data, steps, seed, share,
                                                 device=self.ctx.training_device(LADDER_PARAMS))
            if session.stop_requested:  # Stop came while the data loaded
                ladder.stop()
            params = _parameter_counts(ladder)
            started, last_ui = time.monotonic(), 0.0
            for event in ladder.climb():
                now, sharing = time.monotonic(), self.ctx.trainings
                slower = slowdown(sharing, share.slots)  # as the Train tab: crowds refresh less
                if event.rung is None and now - last_ui < UI_INTERVAL_S * slower:
                    continue
                last_ui = now
                registry.touch(session)
                yield _status(event, sharing), _plot(ladder, event), _table(ladder, params, event)
            # the final state, always: also after a Stop between rungs, which yields no event
            yield _ended_status(ladder, time.monotonic() - started), _plot(ladder), _table(ladder, params)

    def stop(self, request: gr.Request):
        """Stop the climb after the current step; the finished rungs stay. Answers once the climb has
        ended (or after STOP_WAIT_S), so its status is the last word."""
        session = self.ctx.registry.peek(request)
        if session is None or session.job_name != JOB:
            return gr.skip()  # nothing climbs: the status stays as it is
        session.stop_work()
        deadline = time.monotonic() + STOP_WAIT_S
        while session.job_name == JOB and time.monotonic() < deadline:
            time.sleep(0.02)
        if session.job_name == JOB:
            return "Stopping after this step; the finished rungs are kept."
        if session.ladder is None:  # stopped (or failed) while Tiny Shakespeare loaded: nothing climbed
            return "Stopped before the first rung."
        return _ended_status(session.ladder)

    def initial(self) -> tuple[str, PlotData, pd.DataFrame]:
        """The tab before any climb: every rung pending, the lecture's figures, an empty chart."""
        status = (f"Press **Climb the ladder**: {len(RUNGS)} models train one after another, and each one's curve "
                  "and loss appear as it learns.")
        return status, ladder_figure([], min(DEFAULT_STEPS, self.max_steps)), _table(None, {})


# ------------------------------------------------------------------ views


def _parameter_counts(ladder: Ladder) -> dict[str, int]:
    """Each rung's size, known before it trains (built on the meta device: no memory)."""
    with torch.device("meta"):
        return {stage: GPT(ladder.configs(stage)[0]).parameter_counts()["total"] for stage in ladder.stages}


def _label(index: int, stage: str) -> str:
    return f"{index + 1}. {RUNGS[stage].title}"


def _plot(ladder: Ladder, current: LadderEvent | None = None) -> PlotData:
    """The finished rungs' curves and the current rung's so far."""
    shown = [(rung.stage, rung.curve) for rung in ladder.rungs]
    if current is not None and current.rung is None:
        shown.append((current.stage, current.curve))
    return ladder_figure([(_label(i, stage), curve, RUNGS[stage].lecture_loss)
                          for i, (stage, curve) in enumerate(shown)], ladder.steps)


def _table(ladder: Ladder | None, params: dict[str, int], current: LadderEvent | None = None) -> pd.DataFrame:
    """One row per rung: its loss (or where it stands), the lecture's, the change, its size and time."""
    rungs = [] if ladder is None else ladder.rungs
    ended = ladder is not None and current is None  # rungs not trained by now never will be
    rows = []
    for index, (name, stage) in enumerate(RUNGS.items()):
        rung = rungs[index] if index < len(rungs) else None
        before = rungs[index - 1] if 0 < index <= len(rungs) else None
        if rung is not None:
            loss = f"{rung.val_loss:.3f}" + (f" (stopped at step {rung.steps:,})" if rung.stopped else "")
        elif current is not None and current.index == index:
            loss = TRAINING  # the status line says which step
        else:
            loss = NOT_REACHED if ended else PENDING
        rows.append([
            _label(index, name), loss, "" if stage.lecture_loss is None else f"{stage.lecture_loss:.2f}",
            f"{rung.val_loss - before.val_loss:+.3f}" if rung and before and not rung.stopped else "",  # like for like
            f"{params[name]:,}" if name in params else "", f"{rung.seconds:.1f}" if rung is not None else "",
        ])
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _status(event: LadderEvent, sharing: int) -> str:
    """Where the climb is: the rung, its step and time left; how many share the server when others train."""
    title, step = RUNGS[event.stage].title, event.event
    where = f"Rung {event.index + 1} of {event.total}: **{title}**"
    if event.rung is not None:
        status = f"{where} {'stopped' if event.rung.stopped else 'done'}, validation loss {event.rung.val_loss:.3f}."
    else:
        status = f"{where}, step {step.step:,} / {step.max_iters:,}, about {duration(step.eta)} left on this rung."
    if sharing > 1:
        status += f" {sharing} trainings share this server, taking turns step by step."
    return status


def _ended_status(ladder: Ladder, seconds: float | None = None) -> str:
    """The last word: every rung climbed (in `seconds`, when known), or where a Stop ended it."""
    rungs, total = ladder.rungs, len(ladder.stages)
    finished = [rung for rung in rungs if not rung.stopped]
    if len(finished) == total:
        took = "" if seconds is None else f" in {duration(seconds)}"
        return (f"Climbed all {total} rungs ({ladder.steps:,} steps each){took}: validation loss "
                f"{finished[0].val_loss:.3f} → {finished[-1].val_loss:.3f}. The table sets each beside the "
                "lecture's.")
    if rungs and rungs[-1].stopped:
        where = (f"Stopped on rung {len(rungs)} ({RUNGS[rungs[-1].stage].title}) at step {rungs[-1].steps:,} "
                 f"of {ladder.steps:,}")
    else:
        where = f"Stopped after rung {len(rungs)} of {total}" if rungs else "Stopped before the first rung"
    kept = ("no rung had finished" if not finished else "the table keeps the finished rung" if len(finished) == 1
            else f"the table keeps the {len(finished)} finished rungs")
    return f"{where}: {kept}. **Climb the ladder** starts again from the bottom."


# ------------------------------------------------------------------ layout


def build(ctx: AppContext) -> LadderHandlers:
    handlers = LadderHandlers(ctx)
    status0, plot0, table0 = handlers.initial()
    gr.Markdown(INTRO, elem_id="ladder-intro")
    with gr.Accordion("What each rung adds", open=False):
        gr.Markdown(RUNG_NOTES)
    with gr.Row(equal_height=True):
        steps = gr.Slider(handlers.min_steps, handlers.max_steps, min(DEFAULT_STEPS, handlers.max_steps),
                          step=STEP_SIZE, label="Steps per rung", scale=3, min_width=240, elem_id="ladder-steps")
        seed = gr.Number(DEFAULT_SEED, label="Seed", precision=0, minimum=0, maximum=2**31 - 1, scale=1,
                         min_width=120, elem_id="ladder-seed")
        with gr.Column(scale=2, min_width=240):
            climb = gr.Button("Climb the ladder", variant="primary", elem_id="ladder-train")
            stop = gr.Button("Stop", variant="stop", elem_id="ladder-stop")
    status = gr.Markdown(status0, elem_id="ladder-status")
    with gr.Row(equal_height=False):
        plot = LivePlot(plot0, label="Validation loss of every rung", min_width=320, elem_id="ladder-plot")
        table = gr.Dataframe(table0, label="Each rung beside the lecture", interactive=False, wrap=True,
                             column_widths=list(COLUMN_WIDTHS), min_width=320, elem_id="ladder-table")

    climb.click(handlers.climb, [steps, seed], [status, plot, table], api_name="ladder", **ctx.heavy("train"))
    stop.click(handlers.stop, None, status, api_name="ladder_stop", show_progress="hidden", **ctx.cheap())
    return handlers
