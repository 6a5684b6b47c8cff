"""Compare runs (on the Train tab): the session's last few runs side by side. Their loss curves
overlaid, the attention of one layer of each at its last step, and a table of what tells them apart
(with each run's attention entropy: without √d scaling the softmax saturates and it falls).

The Train tab records a run when its training ends (`record`); a new model is a new run, Train on the
same model updates its run. `/compare_runs` returns the kept runs as JSON, their maps included.

Never imports another module of the Train tab: the run calls `record`, the layout calls `build`.
"""

from __future__ import annotations

import gradio as gr

from core.runs import RUNS_KEPT, RunLog, RunRecord, varying_fields
from playground import validate
from playground.context import AppContext
from playground.figures import note_figure
from playground.figures.compare import compare_attention_figure, compare_loss_figure, run_name
from playground.sessions import Session

COLUMNS = ("run", "differs in", "corpus", "steps", "train loss", "val loss", "attention entropy (bits)")
NO_RUNS = "Train a model: each run is kept here (the last four), to compare curves and attention."
INTRO = (
    f"The last {RUNS_KEPT} runs of this session: each **New model** is a new run. Try the same preset with and "
    "without **Scale by √d**, or one head against four. Without √d scaling the attention entropy falls: one key "
    "takes all the weight."
)


class CompareHandlers:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.registry = ctx.registry
        self.max_layers = ctx.settings.max_layers

    def refresh(self, request: gr.Request) -> tuple:
        """After a run: every kept run chosen, and drawn at the last layer of the deepest; the Layer slider
        reaches that far and no further, and is hidden while every run has one layer."""
        runs = self._runs(request)
        numbers = [record.number for record in runs.records]
        choices = [(run_name(record, []), record.number) for record in runs.records]
        layer = max((record.attention.size(0) - 1 for record in runs.records if record.attention is not None),
                    default=0)
        slider = gr.update(maximum=layer, value=layer, visible=True) if layer else gr.update(value=0, visible=False)
        return (gr.update(choices=choices, value=numbers), slider, *self.show(numbers, layer, request))

    def show(self, chosen, layer, request: gr.Request) -> tuple:
        """(loss figure, attention figure, table) of the chosen runs, at `layer` of each."""
        layer = validate.integer(layer, "Layer", 0, self.max_layers - 1)
        records = self._runs(request).get(_numbers(chosen))
        if not records:
            note = note_figure(NO_RUNS if not self._runs(request).records else "Choose runs to compare.")
            return note, note, []
        varying = varying_fields(records)
        with_maps = [record for record in records if record.attention is not None]
        attention = (compare_attention_figure(with_maps, layer) if with_maps
                     else note_figure("None of these runs has attention to show."))
        return compare_loss_figure(records, varying), attention, [_row(record, varying) for record in records]

    def compare_runs(self, request: gr.Request) -> dict:
        """The kept runs: settings, curves, final losses and attention (maps rounded to 3 decimals)."""
        runs = self._runs(request)
        return {"runs": [_as_json(record) for record in runs.records], "max_runs": runs.max_runs,
                "bytes": runs.nbytes}

    def _runs(self, request: gr.Request) -> RunLog:
        session = self.registry.peek(request)
        return RunLog() if session is None else session.runs


def record(session: Session, probe_labels: list[str]) -> None:
    """Keep the session's current run (its model, curves and last attention snapshot) to compare."""
    trained = session.trained
    movie = trained.movie
    maps = movie.frames[-1].maps if movie is not None and movie.frames else None
    session.runs.keep(RunRecord.of(
        trained.run, trained.model.config, trained.corpus_name, trained.history,
        trained.train_config.to_dict() if trained.train_config else {}, probe_labels, maps,
    ))


def _numbers(chosen) -> list[int]:
    """The run numbers a client chose (a list of at most RUNS_KEPT integers)."""
    if chosen is None:
        return []
    if not isinstance(chosen, list) or len(chosen) > RUNS_KEPT:
        raise gr.Error(f"Runs: choose up to {RUNS_KEPT} of the kept runs.")
    return [validate.integer(number, "Run", 1) for number in chosen]


def _row(record: RunRecord, varying: list[str]) -> list:
    entropy = "" if record.entropy_bits is None else round(float(record.entropy_bits.mean()), 3)
    losses = [round(loss, 4) if loss is not None else "" for loss in (record.train_loss, record.val_loss)]
    return [f"Run {record.number}", record.describe(varying) or "(same settings)", record.corpus, record.step,
            *losses, entropy]


def _as_json(record: RunRecord) -> dict:
    return {
        "run": record.number, "title": record.title, "config": record.config.to_dict(), "train": record.train, "corpus": record.corpus,
        "step": record.step, "train_loss": record.train_loss, "val_loss": record.val_loss,
        "train_curve": {"steps": record.train_curve[0], "loss": record.train_curve[1]},
        "val_curve": {"steps": record.val_curve[0], "loss": record.val_curve[1]},
        "probe_tokens": record.probe_labels,
        "attention": None if record.attention is None else record.attention.float().round(decimals=3).tolist(),
        "entropy_bits": None if record.entropy_bits is None else record.entropy_bits.round(decimals=3).tolist(),
    }


def build(ctx: AppContext) -> tuple[CompareHandlers, list[gr.Component]]:
    """The Compare runs section; returns its handlers and the outputs of `refresh`, which the Train tab
    calls when a run ends."""
    handlers = CompareHandlers(ctx)
    gr.Markdown(INTRO, elem_id="compare-intro")
    with gr.Row(equal_height=True):
        chosen = gr.CheckboxGroup([], label="Runs to compare", scale=3, min_width=200, elem_id="compare-runs")
        # hidden until `refresh` sets it to the runs' depth
        layer = gr.Slider(0, 1, value=0, step=1, scale=2, min_width=200, visible=False,
                          label="Layer", info="A run with fewer layers shows its last.", elem_id="compare-layer")
    with gr.Row(equal_height=False):
        loss = gr.Plot(note_figure(NO_RUNS), label="Loss of each run", min_width=300, elem_id="compare-loss")
        attention = gr.Plot(note_figure(NO_RUNS), label="Attention of each run", min_width=300,
                            elem_id="compare-attention")
    table = gr.Dataframe(headers=list(COLUMNS), label="The runs", interactive=False, wrap=True,
                         elem_id="compare-table")
    cheap = dict(**ctx.cheap(), show_progress="hidden")
    gr.on([chosen.input, layer.release], handlers.show, [chosen, layer], [loss, attention, table],
          api_name="compare_show", **cheap)
    gr.api(handlers.compare_runs, api_name="compare_runs", **ctx.cheap())
    return handlers, [chosen, layer, loss, attention, table]
