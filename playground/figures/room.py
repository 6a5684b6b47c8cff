"""Figures of a teacher's class view: every learner's loss curve on one chart, a gallery of one attention map
per learner, and the class chart as a PNG for the room's results.

The class view redraws every second for up to 200 learners on a small server, so the Plotly figures come as JSON
ready for gr.Plot (plain traces, a layout checked by Plotly once and cached), as the Train tab's loss chart does.
Learners' names are drawn as text, never read as HTML: they are escaped wherever Plotly renders its pseudo-HTML.
The PNG is drawn with Pillow (no browser or plotting library on the server).

Never imports a tab, the sessions or the rooms: figures draw the names and numbers they are given.
"""

from __future__ import annotations

import functools
import html
import io
import json
import math
from collections.abc import Callable, Sequence

import plotly.graph_objects as go
from PIL import Image, ImageDraw, ImageFont

from core.movie import evenly
from playground.figures import PALETTE, VERMILLION, note_figure
from playground.figures.attention import COLORSCALE, TITLE_TOP_PX, TOOLBAR_REMOVED
from playground.gradio_internals import PlotData, plotly_json

# A learner's curve: their name, the steps, the training losses at those steps.
Curve = tuple[str, Sequence[int], Sequence[float]]
# A learner's map in the gallery: their name, a head's (T, T) weights (None: no map) and the probe's tokens (None:
# their positions stand in, as for a learner's own text).
Map = tuple[str, Sequence[Sequence[float]] | None, Sequence[str] | None]

CLASS_POINTS = 150  # per learner on the live chart: 150 learners stay ~0.5 MB of JSON a second
LEGEND_MAX = 10  # more learners and a legend is a wall of names (a phone's chart gone): the hover tells them apart
LEGEND_ENTRY_PX = 120  # a legend entry's text (most of a long name): two to a row on a phone, eight on a laptop
HIGHLIGHT = VERMILLION  # the picked learner; the others take the palette's colours faintly, or grey beside it
OTHERS_GREY = "#9ca3af"
LINE_OPACITY = 0.55
EMPTY_CLASS = "No learner has trained yet."
TILE_PX = 150  # a gallery row's height
TILE_TITLE_CHARS = 13  # of a name over a tile (the hover has it whole): a phone's tiles are narrow
NO_MAP = "no map yet"  # a learner with no snapshot yet, or whose model has no such head (HeadMap cannot tell)


def _text(name: str) -> str:
    """A name as Plotly shows it: its <, > and & escaped, so no name is read as markup."""
    return html.escape(name, quote=False)


def _losses(values: Sequence[float | None]) -> list[float | None]:
    """JSON has no NaN: a diverged step's loss is a gap in the line; 4 significant figures are far below a pixel."""
    return [None if value is None or not math.isfinite(value) else float(f"{value:.4g}") for value in values]


def _thinned(steps: Sequence[int], losses: Sequence[float]) -> tuple[list[int], list[float | None]]:
    points = evenly(list(zip(steps, losses)), CLASS_POINTS)
    return [int(step) for step, _ in points], _losses([loss for _, loss in points])


def class_loss_figure(curves: list[Curve], highlight: str | None = None, max_steps: int | None = None) -> PlotData:
    """Every learner's training loss on one chart, one thin line each (named by the learner, for the hover and,
    with few learners, the legend); the `highlight` learner's line drawn last, thick and in a strong colour, and
    named in the title. `max_steps` fixes the x range so curves grow from left to right.

    Each line keeps at most CLASS_POINTS points (its first and last among them)."""
    if not curves:
        return _note_plot(EMPTY_CLASS)
    picked = highlight if any(name == highlight for name, _, _ in curves) else None
    legend = len(curves) <= LEGEND_MAX
    traces, last = [], []
    for i, (name, steps, losses) in enumerate(curves):
        xs, ys = _thinned(steps, losses)
        trace = dict(type="scatter", x=xs, y=ys, mode="lines", name=_text(name), hoverlabel=dict(namelength=-1),
                     hovertemplate="%{fullData.name}<br>step %{x}<br>loss %{y:.4f}<extra></extra>")
        if name == picked:
            last.append({**trace, "line": dict(color=HIGHLIGHT, width=3.5)})
        else:
            colour = OTHERS_GREY if picked else PALETTE[i % len(PALETTE)]
            traces.append({**trace, "line": dict(color=colour, width=1.2), "opacity": LINE_OPACITY})
    layout = _loss_layout(picked is not None, legend, max_steps)
    title = {**layout["title"], "text": f"Training loss of {_count(len(curves))}"}
    if picked:  # under the title, where a long name still fits a phone
        title["subtitle"] = {**title["subtitle"], "text": f"<b>{_text(picked)}</b> highlighted"}
    layout = {**layout, "title": title}
    return plotly_json(json.dumps({"data": traces + last, "layout": layout}, separators=(",", ":")))


def _count(n: int) -> str:
    return f"{n} learner" + ("" if n == 1 else "s")


@functools.lru_cache(maxsize=64)
def _loss_layout(highlighted: bool, legend: bool, max_steps: int | None) -> dict:
    """The class chart's layout, checked by Plotly and with its theme (read only: callers copy what they change).
    A room has a few step counts, so a few layouts."""
    fig = go.Figure()
    fig.update_layout(
        height=380, template="plotly_white", hovermode="closest", showlegend=legend,
        # The title below Gradio's block label; a legend at the foot, where a phone's rows of it cover nothing.
        margin=dict(l=45, r=10, t=TITLE_TOP_PX + (50 if highlighted else 30), b=110 if legend else 40),
        title=dict(text="", font=dict(size=14), x=0, xref="paper", xanchor="left", y=1, yref="container",
                   yanchor="top", pad=dict(t=TITLE_TOP_PX),
                   subtitle=dict(text="", font=dict(size=13, color=HIGHLIGHT))),
        legend=dict(orientation="h", x=0, y=0, xanchor="left", yanchor="bottom", yref="container",
                    entrywidth=LEGEND_ENTRY_PX, entrywidthmode="pixels", font=dict(size=11)),
        xaxis=dict(title=dict(text="step", standoff=4), rangemode="tozero"),
        yaxis=dict(title=dict(text="training loss", standoff=4)),
        modebar=dict(remove=TOOLBAR_REMOVED), hoverlabel=dict(bgcolor="white"),
        uirevision="class-loss",  # keep the teacher's zoom while the chart updates every second
    )
    if max_steps:
        fig.update_xaxes(range=[0, max_steps])
    return json.loads(fig.to_json())["layout"]


@functools.lru_cache(maxsize=8)
def _note_plot(text: str) -> PlotData:
    return plotly_json(note_figure(text).to_json())


def class_maps_figure(maps: list[Map], layer: int, head: int, columns: int = 6) -> PlotData:
    """A gallery of one small heatmap per learner (titled by name) of head `head` in layer `layer`, `columns` to
    a row; a learner without that map gets an empty tile saying so. Hover reads "query → key: weight", with the
    probe's tokens where given (positions otherwise)."""
    if not maps:
        return _note_plot(EMPTY_CLASS)
    columns = max(1, min(columns, len(maps)))
    rows = -(-len(maps) // columns)
    axes, tiles = _grid(len(maps), columns)
    traces, notes = [], []
    for i, ((name, weights, labels), (left, right, _, top)) in enumerate(zip(maps, tiles)):
        short = name if len(name) <= TILE_TITLE_CHARS else name[:TILE_TITLE_CHARS - 1] + "…"
        middle = (left + right) / 2
        notes.append(dict(text=_text(short), x=middle, y=top, xanchor="center", yanchor="bottom", xref="paper",
                          yref="paper", showarrow=False, font=dict(size=10)))
        if weights is None:
            notes.append(dict(text=NO_MAP, x=middle, y=top, xanchor="center", yanchor="top", yshift=-24,
                              xref="paper", yref="paper", showarrow=False, font=dict(size=10, color="#6b7280")))
            continue
        positions = _positions(len(weights), labels)
        traces.append(dict(
            type="heatmap", z=[_percents(row) for row in weights], x=positions, y=positions, coloraxis="coloraxis",
            xaxis=f"x{_suffix(i)}", yaxis=f"y{_suffix(i)}", name=_text(name),
            hovertemplate="%{fullData.name}<br>%{y} → %{x}: %{z}%<extra></extra>",
        ))
    # Only the drawn tiles' axes: plotly cannot tick an empty category axis tied to another by scaleanchor (it
    # throws "ax.dtick error: Infinity" in the page while the learners have no map yet).
    drawn = {trace["xaxis"][1:] for trace in traces}
    axes = {name: axis for name, axis in axes.items() if name[5:] in drawn} or {
        "xaxis": dict(visible=False), "yaxis": dict(visible=False)}
    base = _gallery_layout(rows)
    layout = {**base, **axes, "annotations": notes,
              "title": {**base["title"], "text": f"Layer {layer}, head {head}: one map per learner"}}
    return plotly_json(json.dumps({"data": traces, "layout": layout}, separators=(",", ":")))


def _percents(row: Sequence[float]) -> list[int | None]:
    """Weights as whole percents: the colour scale shows no finer, and 150 maps of 32 x 32 are 40% less JSON."""
    return [round(100 * w) if math.isfinite(w) else None for w in row]


def _positions(n: int, labels: Sequence[str] | None) -> list[str]:
    """Each position's name for the hover: "#3 e" (the position keeps repeated tokens apart, which plotly would
    merge), or "#3" without the tokens."""
    if labels is None or len(labels) != n:
        return [f"#{i}" for i in range(n)]
    return [f"#{i} {_text(label)}" for i, label in enumerate(labels)]


def _suffix(tile: int) -> str:
    """Plotly's name for a tile's axes: x and y for the first, x2 and y2 for the second..."""
    return "" if tile == 0 else str(tile + 1)


@functools.lru_cache(maxsize=256)
def _grid(n: int, columns: int) -> tuple[dict, list[tuple[float, float, float, float]]]:
    """The gallery's axes (one pair per tile, hidden, each map square and upright) and each tile's paper box
    (left, right, bottom, top), row by row from the top. Read only."""
    rows = -(-n // columns)
    gap_x, gap_y = 0.02, 0.3 / rows  # a row's gap holds its tiles' titles
    width, height = (1 - gap_x * (columns - 1)) / columns, (1 - gap_y * rows) / rows
    axes, tiles = {}, []
    for i in range(n):
        row, column = divmod(i, columns)
        left, top = column * (width + gap_x), 1 - gap_y - row * (height + gap_y)
        tiles.append((left, left + width, top - height, top))
        suffix = _suffix(i)
        axes[f"xaxis{suffix}"] = dict(domain=[left, left + width], anchor=f"y{suffix}", visible=False,
                                      constrain="domain", type="category")
        axes[f"yaxis{suffix}"] = dict(domain=[top - height, top], anchor=f"x{suffix}", visible=False, type="category",
                                      autorange="reversed", scaleanchor=f"x{suffix}", constrain="domain",
                                      constraintoward="top")  # each map right under its title
    return axes, tiles


@functools.lru_cache(maxsize=64)
def _gallery_layout(rows: int) -> dict:
    """The gallery's theme, size, title and shared colour scale, per number of rows (read only)."""
    fig = go.Figure()
    fig.update_layout(
        height=TILE_PX * rows + TITLE_TOP_PX + 40, template="plotly_white",
        margin=dict(l=10, r=10, t=TITLE_TOP_PX + 30, b=10),
        title=dict(text="", font=dict(size=14), x=0, xref="paper", xanchor="left", y=1, yref="container",
                   yanchor="top", pad=dict(t=TITLE_TOP_PX)),
        coloraxis=dict(colorscale=COLORSCALE, cmin=0, cmax=100, showscale=False),
        modebar=dict(remove=TOOLBAR_REMOVED), hoverlabel=dict(bgcolor="white"), uirevision="class-maps",
    )
    return json.loads(fig.to_json())["layout"]


PNG_SIZE = (1200, 700)
PNG_MARGINS = (90, 30, 100, 70)  # left, right, top, bottom: room for the title, ticks and axis titles
PNG_TICKS = 6
INK, GRID, PNG_GREY = (31, 41, 55), (229, 231, 235), (156, 163, 175)


def class_chart_png(curves: list[Curve], title: str, highlight: str | None = None) -> bytes:
    """The class chart for the room's results, as a 1200 x 700 PNG: every learner's training loss in thin grey,
    the `highlight` learner's thick and in colour (named under the title), ticked axes. Non-finite losses are
    skipped."""
    image = Image.new("RGB", PNG_SIZE, "white")
    draw = ImageDraw.Draw(image)
    left, right, top, bottom = PNG_MARGINS
    box = (left, top, PNG_SIZE[0] - right, PNG_SIZE[1] - bottom)
    draw.text((left, 24), title, fill=INK, font=_font(24))
    points = [[(s, v) for s, v in zip(steps, losses) if v is not None and math.isfinite(v)]
              for _, steps, losses in curves]
    every = [point for line in points for point in line]
    if not every:
        draw.text((PNG_SIZE[0] // 2, PNG_SIZE[1] // 2), EMPTY_CLASS, fill=PNG_GREY, font=_font(20), anchor="mm")
        return _png(image)
    x_ticks = _ticks(0, max(step for step, _ in every))
    y_ticks = _ticks(min(loss for _, loss in every), max(loss for _, loss in every))
    place = _placer(box, (x_ticks[0], x_ticks[-1]), (y_ticks[0], y_ticks[-1]))
    _axes(image, box, place, x_ticks, y_ticks)
    picked = [line for (name, _, _), line in zip(curves, points) if name == highlight]
    for (name, _, _), line in zip(curves, points):
        if name != highlight and len(line) > 1:
            draw.line([place(*point) for point in line], fill=PNG_GREY, width=1)
    for line in picked:
        draw.line([place(*point) for point in line], fill=HIGHLIGHT, width=4, joint="curve")
    if picked:
        draw.text((left, 60), f"{highlight} highlighted", fill=HIGHLIGHT, font=_font(18))
    return _png(image)


def _placer(box: tuple[int, int, int, int], x_range: tuple[float, float],
            y_range: tuple[float, float]) -> Callable[[float, float], tuple[float, float]]:
    """(step, loss) -> the pixel in `box` (left, top, right, bottom) for those data ranges."""
    left, top, right, bottom = box
    (x0, x1), (y0, y1) = x_range, y_range
    x_span, y_span = (x1 - x0) or 1, (y1 - y0) or 1
    return lambda x, y: (left + (x - x0) / x_span * (right - left), bottom - (y - y0) / y_span * (bottom - top))


def _axes(image: Image.Image, box: tuple[int, int, int, int], place: Callable[[float, float], tuple[float, float]],
          x_ticks: list[float], y_ticks: list[float]) -> None:
    """Grid lines and labels at the ticks, the frame and the axis titles."""
    left, top, right, bottom = box
    draw = ImageDraw.Draw(image)
    font = _font(16)
    for tick in x_ticks:
        x, _ = place(tick, y_ticks[0])
        draw.line([(x, top), (x, bottom)], fill=GRID)
        draw.text((x, bottom + 8), _tick_text(tick), fill=INK, font=font, anchor="mt")
    for tick in y_ticks:
        _, y = place(x_ticks[0], tick)
        draw.line([(left, y), (right, y)], fill=GRID)
        draw.text((left - 8, y), _tick_text(tick), fill=INK, font=font, anchor="rm")
    draw.rectangle(box, outline=INK)
    draw.text(((left + right) / 2, bottom + 40), "step", fill=INK, font=font, anchor="mt")
    label = Image.new("RGBA", (200, 24), (255, 255, 255, 0))
    ImageDraw.Draw(label).text((100, 12), "training loss", fill=INK, font=font, anchor="mm")
    rotated = label.rotate(90, expand=True)
    image.paste(rotated, (18, (top + bottom) // 2 - 100), rotated)


def _ticks(low: float, high: float, count: int = PNG_TICKS) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) from at or below `low` to at or above `high`."""
    span = (high - low) or abs(high) or 1.0
    raw = span / (count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first, last = math.floor(low / step), math.ceil(high / step)
    if first == last:
        last += 1
    return [round(k * step, 10) for k in range(first, last + 1)]


def _tick_text(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) and abs(value) >= 1 else f"{value:g}"


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's own font (no system font is needed): the server may have none."""
    return ImageFont.load_default(size)


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()
