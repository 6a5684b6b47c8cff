"""Baby GPT tab: a GPT with a vocabulary of V tokens and a context of L is a Markov chain over
V**L states. Train one (Karpathy's example by default) and watch its chain form, scrub through
training, compare it with the data, sample a walk, and change the temperature.

Train (api `/baby_gpt_train`) runs under the session's job lock and keeps every step's snapshot
in `session.baby`; scrubbing (`/baby_gpt_scrub`), temperature (`/baby_gpt_temperature`) and walks
(`/baby_gpt_walk`) only redraw from those snapshots, so they are cheap and never wait behind
training. Before the first training they show the untrained default model.

Never imports another tab.
"""

from __future__ import annotations

import math
import time

import gradio as gr
import pandas as pd
import torch

from core.babygpt import (
    CONTEXT_LENGTHS,
    EXAMPLE_SEQUENCE,
    VOCAB_SIZES,
    BabyConfig,
    BabyRun,
    ChainAnalysis,
    Snapshot,
    analyse_chain,
    sample_walk,
    transition_graph,
    unseen_states,
)
from playground import validate
from playground.context import AppContext
from playground.figures.baby import chain_figure, comparison_figure
from playground.figures.training import loss_figure
from playground.live_plot import LivePlot
from playground.sessions import BabyState, training_bytes

DEFAULTS = BabyConfig()
# The baby stays a baby on a shared server: every step is one batch of the whole sequence, and
# every step's snapshot is kept for scrubbing.
MAX_SEQUENCE_CHARS = 500
MAX_STEPS = 1000
MAX_LAYERS, MAX_HEADS, MAX_EMBD = 6, 8, 64
MAX_WALK = 200
MAX_START_CHARS = 16
# Animation: frames at least every FRAME_INTERVAL_S (about 5 a second); a run shorter than
# MIN_ANIMATION_S is paced out to it, so the eye can follow the chain forming.
FRAME_INTERVAL_S = 0.19
MIN_ANIMATION_S = 1.2
TEMPERATURE_RANGE = (0.05, 5.0)


class BabyHandlers:
    """The tab's event handlers as plain methods (tests call them with a session id as request)."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        # Before a session trains, it sees step 0 of the default run: the untrained model. All
        # sessions share this run read-only (it never trains further); each keeps its own walk.
        self.preview = BabyRun.start(EXAMPLE_SEQUENCE, DEFAULTS)
        training = self.preview.train()
        next(training)
        training.close()

    # ---- validation

    def recipe(self, sequence, vocab_size, context_length, n_layer, n_head, n_embd, steps, learning_rate,
               seed) -> tuple[str, BabyConfig]:
        """Check every input on the server; core names what is wrong with the sequence or sizes."""
        s = self.ctx.settings
        sequence = validate.text(sequence, "Sequence", MAX_SEQUENCE_CHARS)
        config = dict(
            vocab_size=validate.integer(vocab_size, "Vocabulary size V", min(VOCAB_SIZES), max(VOCAB_SIZES)),
            context_length=validate.integer(context_length, "Context length L", min(CONTEXT_LENGTHS),
                                            max(CONTEXT_LENGTHS)),
            n_layer=validate.integer(n_layer, "Layers", 1, min(MAX_LAYERS, s.max_layers), cap=s.cap_hint("max_layers")),
            n_head=validate.integer(n_head, "Heads", 1, min(MAX_HEADS, s.max_heads), cap=s.cap_hint("max_heads")),
            n_embd=validate.integer(n_embd, "Embedding size", 1, min(MAX_EMBD, s.max_embd), cap=s.cap_hint("max_embd")),
            steps=validate.integer(steps, "Steps", 1, min(MAX_STEPS, s.max_iters), cap=s.cap_hint("max_iters")),
            learning_rate=validate.number(learning_rate, "Learning rate", 1e-5, 1.0),
            seed=validate.integer(seed, "Seed", 0, 2**31 - 1),
        )
        with validate.user_errors():  # e.g. 4 tokens with a context of 4 are 256 states: too many to draw
            return sequence, BabyConfig(**config)

    @staticmethod
    def _temperature(value) -> float:
        return validate.number(value, "Temperature", *TEMPERATURE_RANGE)

    # ---- events

    def train(self, sequence, vocab_size, context_length, n_layer, n_head, n_embd, steps, learning_rate, seed,
              temperature, request: gr.Request):
        """Stream training: (chain, status, step slider, loss, comparison, table, analysis, walk)."""
        sequence, config = self.recipe(sequence, vocab_size, context_length, n_layer, n_head, n_embd, steps,
                                       learning_rate, seed)
        temperature = self._temperature(temperature)
        with validate.user_errors():
            run = BabyRun.start(sequence, config)
        with self.ctx.registry.job(request, "baby training") as session:
            self.ctx.registry.claim_model(session, training_bytes(sum(p.numel() for p in run.model.parameters())))
            state = session.baby = BabyState(run)
            started = time.monotonic()
            shown = started - FRAME_INTERVAL_S  # the first snapshot is shown at once
            for snapshot in run.train():
                done = snapshot.step == config.steps
                # Frame times: real time, or the paced replay time if training runs ahead of it.
                due = started + MIN_ANIMATION_S * snapshot.step / config.steps
                if not done and max(time.monotonic(), due) - shown < FRAME_INTERVAL_S:
                    continue
                time.sleep(max(0.0, due - time.monotonic()))
                shown = time.monotonic()
                self.ctx.registry.touch(session)
                if done:
                    seconds = shown - started
                    yield self._render(state, snapshot.step, temperature, _done(run, seconds))
                else:
                    yield self._frame(state, snapshot, temperature)

    def scrub(self, step, temperature, request: gr.Request):
        """Redraw everything at another training step (from the stored snapshots)."""
        state = self._state(request)
        step = validate.integer(step, "Step", 0, state.run.config.steps)
        state.walk = None  # a walk belongs to the chain it was sampled from
        return self._render(state, step, self._temperature(temperature))

    def temperature(self, step, temperature, request: gr.Request):
        """Redraw everything with the next-token distributions at another temperature."""
        return self.scrub(step, temperature, request)

    def walk(self, start, length, seed, step, temperature, request: gr.Request):
        """Sample a walk on the chain shown (step, temperature) and draw it: (chain, walk text)."""
        state = self._state(request)
        run = state.run
        step = validate.integer(step, "Step", 0, run.config.steps)
        temperature = self._temperature(temperature)
        length = validate.integer(length, "Walk length", 1, MAX_WALK)
        seed = validate.integer(seed, "Walk seed", 0, 2**31 - 1)
        start = validate.text(start, "Start state", MAX_START_CHARS, allow_empty=True).strip()
        snapshot = run.snapshot(step)
        probs = snapshot.probs(temperature)
        with validate.user_errors():
            analysis = analyse_chain(run.space, probs, run.counts)
            first = run.space.parse_state(start) if start else int(analysis.stationary.argmax())
            state.walk = sample_walk(run.space, probs, first, length, torch.Generator().manual_seed(seed))
        return self._chain(state, snapshot, probs, temperature, analysis.unseen), _walk_text(run, state.walk, seed)

    # ---- rendering

    def _state(self, request: gr.Request) -> BabyState:
        session = self.ctx.registry.get(request)
        if session.baby is None:
            session.baby = BabyState(self.preview)
        return session.baby

    def _chain(self, state: BabyState, snapshot: Snapshot, probs: torch.Tensor, temperature: float,
               unseen: list[int]):
        run = state.run
        title = chain_title(snapshot, run.config.steps, temperature)
        return chain_figure(transition_graph(run.space, probs), unseen=unseen, walk=state.walk, title=title)

    def _frame(self, state: BabyState, snapshot: Snapshot, temperature: float) -> tuple:
        """A frame while training: the chain, status, slider and loss; the rest waits for the end."""
        run = state.run
        chain = self._chain(state, snapshot, snapshot.probs(temperature), temperature, unseen_states(run.counts))
        status = f"Training... step {snapshot.step} / {run.config.steps}, loss {snapshot.loss:.3f}"
        return (chain, status, _slider(run, snapshot.step), _loss(run), gr.skip(), gr.skip(), gr.skip(), "")

    def _render(self, state: BabyState, step: int, temperature: float, status: str | None = None) -> tuple:
        run = state.run
        snapshot = run.snapshot(step)
        probs = snapshot.probs(temperature)
        analysis = analyse_chain(run.space, probs, run.counts)
        labels, tokens = run.space.labels(), run.space.tokenizer.chars
        if status is None:
            status = f"Showing step {snapshot.step} of {run.config.steps} at temperature {temperature:g}."
        return (
            self._chain(state, snapshot, probs, temperature, analysis.unseen), status, _slider(run, snapshot.step),
            _loss(run), comparison_figure(analysis, labels, list(tokens)), _table(analysis, labels, tokens),
            _analysis_text(analysis, labels), "" if state.walk is None else gr.skip(),
        )

    def initial(self) -> tuple:
        """The tab's first view: the untrained default model."""
        return self._render(BabyState(self.preview), 0, 1.0, "Untrained: press **Train** to watch the chain form.")


# ------------------------------------------------------------------ small helpers


def chain_title(snapshot: Snapshot, steps: int, temperature: float) -> str:
    """'Step 30 / 50 · loss 0.512', and the temperature when it reshapes the edges (when not 1)."""
    title = f"Step {snapshot.step} / {steps} · loss {snapshot.loss:.3f}"
    return title if temperature == 1 else f"{title} · temperature {temperature:g}"


def _slider(run: BabyRun, step: int) -> dict:
    return gr.update(maximum=run.config.steps, value=step)  # an update, not a new component


def _loss(run: BabyRun):
    history = [{"step": s.step, "train_loss": s.loss} for s in run.snapshots]
    return loss_figure(history, run.config.steps)


def _done(run: BabyRun, seconds: float) -> str:
    first, last = run.snapshots[0], run.snapshots[-1]
    return (
        f"Trained {last.step} steps in {seconds:.1f} s: loss {first.loss:.3f} → {last.loss:.3f}. "
        "Drag **Step** to replay training; change **Temperature** to sharpen or flatten every edge."
    )


def _percent(value: float) -> float | None:
    return None if math.isnan(value) else round(100 * value, 1)


def _table(analysis: ChainAnalysis, labels: list[str], tokens: str) -> pd.DataFrame:
    """One row per state: the model's and the data's next-token distributions side by side."""
    rows = []
    for state, label in enumerate(labels):
        note = "never in the data" if state in analysis.unseen else (
            "disagrees most" if state in analysis.most_disagreeing else "")
        rows.append(
            [label, int(analysis.counts[state].sum())]
            + [_percent(p) for p in analysis.probs[state].tolist()]
            + [_percent(p) for p in analysis.data_probs[state].tolist()]
            + [_percent(analysis.disagreement[state].item()), round(analysis.entropy[state].item(), 3),
               _percent(analysis.stationary[state].item()), note]
        )
    columns = (
        ["state", "seen in data (×)"] + [f"model p({t}) %" for t in tokens] + [f"data p({t}) %" for t in tokens]
        + ["disagreement %", "entropy (bits)", "long-run share %", "note"]
    )
    return pd.DataFrame(rows, columns=columns)


def _analysis_text(analysis: ChainAnalysis, labels: list[str]) -> str:
    cycle = " → ".join(labels[s] for s in analysis.cycle + analysis.cycle[:1])
    top = analysis.stationary.argsort(descending=True)[:4].tolist()
    lines = [
        f"**Most likely cycle:** {cycle} ({analysis.cycle_probability:.0%} per step, the geometric mean of "
        "its edges): the loop the chain most likes to go round.",
        "**Where the chain spends its time** (stationary distribution): "
        + ", ".join(f"{labels[s]} {analysis.stationary[s].item():.0%}" for s in top) + ".",
    ]
    if analysis.unseen:
        lines.append(
            f"**Never in the training data:** {', '.join(labels[s] for s in analysis.unseen)}. The model still "
            "sends them somewhere: that is its inductive bias, not anything it saw."
        )
    surest = int(analysis.entropy.argmin())
    least = int(analysis.entropy.argmax())
    lines.append(
        f"**Surest state:** {labels[surest]} ({analysis.entropy[surest].item():.2f} bits); "
        f"**least sure:** {labels[least]} ({analysis.entropy[least].item():.2f} bits)."
    )
    return "  \n".join(lines)


def _walk_text(run: BabyRun, walk: list[int], seed: int) -> str:
    labels = run.space.labels()
    written = labels[walk[0]] + "".join(labels[s][-1] for s in walk[1:])
    path = " → ".join(labels[s] for s in walk[:25]) + (" → ..." if len(walk) > 25 else "")
    return (
        f"**Walk** of {len(walk) - 1} steps from {labels[walk[0]]} (seed {seed}): {path}  \n"
        f"The chain writes: `{written}`"
    )


# ------------------------------------------------------------------ layout


def build(ctx: AppContext) -> BabyHandlers:
    handlers = BabyHandlers(ctx)
    s = ctx.settings
    chain0, status0, _, loss0, comparison0, table0, analysis0, _ = handlers.initial()
    gr.Markdown(
        "A GPT with a vocabulary of **V** tokens and a context of **L** tokens has exactly V<sup>L</sup> possible "
        "inputs. For each it predicts the next token; append it, drop the first, and you are in the next state. "
        "So the model *is* a Markov chain. The defaults are Karpathy's baby GPT (V=2, L=3, 4 layers, 4 heads, "
        f"16 channels, no biases, 50 steps of AdamW): press **Train** and watch the chain learn `{EXAMPLE_SEQUENCE}`. "
        "Orange states never occur in the data: where they go is the model's inductive bias."
    )
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280):
            sequence = gr.Textbox(EXAMPLE_SEQUENCE, label="Training sequence (symbols 0..V-1; spaces ignored)",
                                  max_length=MAX_SEQUENCE_CHARS, elem_id="baby-sequence", elem_classes="mono")
            with gr.Row():
                # wide enough for its three choices on one line; on a phone the row wraps instead
                vocab_size = gr.Radio(list(VOCAB_SIZES), value=DEFAULTS.vocab_size, label="Vocabulary size V",
                                      min_width=230, elem_id="baby-vocab")
                context_length = gr.Slider(min(CONTEXT_LENGTHS), max(CONTEXT_LENGTHS), DEFAULTS.context_length,
                                           step=1, label="Context length L", elem_id="baby-context")
            with gr.Accordion("Model and training", open=False, elem_id="baby-model"):
                with gr.Row():
                    n_layer = gr.Number(DEFAULTS.n_layer, label="Layers", precision=0, minimum=1,
                                        maximum=min(MAX_LAYERS, s.max_layers))
                    n_head = gr.Number(DEFAULTS.n_head, label="Heads", precision=0, minimum=1,
                                       maximum=min(MAX_HEADS, s.max_heads))
                    n_embd = gr.Number(DEFAULTS.n_embd, label="Embedding size", precision=0, minimum=1,
                                       maximum=min(MAX_EMBD, s.max_embd))
                with gr.Row():
                    steps = gr.Number(DEFAULTS.steps, label="Steps", precision=0, minimum=1,
                                      maximum=min(MAX_STEPS, s.max_iters), elem_id="baby-steps")
                    learning_rate = gr.Number(DEFAULTS.learning_rate, label="Learning rate", minimum=1e-5, maximum=1.0)
                    seed = gr.Number(DEFAULTS.seed, label="Seed", precision=0, minimum=0)
            train = gr.Button("Train baby GPT", variant="primary", elem_id="baby-train")
            status = gr.Markdown(status0, elem_id="baby-status")
            loss = LivePlot(loss0, label="Loss", elem_id="baby-loss")
        with gr.Column(scale=2, min_width=420):
            chain = LivePlot(chain0, label="The model as a Markov chain", elem_id="baby-chain")
            with gr.Row():
                step = gr.Slider(0, DEFAULTS.steps, 0, step=1, label="Step (drag to replay training)",
                                 elem_id="baby-step")
                temperature = gr.Slider(*TEMPERATURE_RANGE, 1.0, step=0.05, label="Temperature",
                                        elem_id="baby-temperature")
            with gr.Row(equal_height=True):
                start = gr.Textbox("", label="Walk from state (empty: the most visited)", max_length=MAX_START_CHARS,
                                   elem_classes="mono", scale=2)
                walk_length = gr.Slider(1, MAX_WALK, 30, step=1, label="Walk length", scale=2)
                walk_seed = gr.Number(0, label="Walk seed", precision=0, minimum=0, scale=1)
                walk = gr.Button("Sample a walk", scale=1, elem_id="baby-walk")
            walk_text = gr.Markdown(elem_id="baby-walk-text")
    analysis = gr.Markdown(analysis0, elem_id="baby-analysis")
    comparison = gr.Plot(comparison0, label="Model vs training data", elem_id="baby-comparison")
    table = gr.Dataframe(table0, label="Every state", interactive=False, elem_id="baby-table")

    outputs = [chain, status, step, loss, comparison, table, analysis, walk_text]
    form = [sequence, vocab_size, context_length, n_layer, n_head, n_embd, steps, learning_rate, seed, temperature]
    train.click(handlers.train, form, outputs, api_name="baby_gpt_train", **ctx.heavy("baby"))
    live = dict(trigger_mode="always_last", show_progress="hidden", **ctx.cheap())
    step.input(handlers.scrub, [step, temperature], outputs, api_name="baby_gpt_scrub", **live)
    temperature.input(handlers.temperature, [step, temperature], outputs, api_name="baby_gpt_temperature", **live)
    walk.click(handlers.walk, [start, walk_length, walk_seed, step, temperature], [chain, walk_text],
               api_name="baby_gpt_walk", **ctx.cheap())
    return handlers
