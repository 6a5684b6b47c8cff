"""The class view's figures (playground.figures.room): the class loss chart, the gallery of maps and the PNG."""

import io
import json
import math

from PIL import Image

from playground.figures import room
from playground.figures.room import class_chart_png, class_loss_figure, class_maps_figure

HOSTILE = "<script>alert(1)</script>"


def figure(plot) -> dict:
    return json.loads(plot.plot)  # strict JSON: a NaN would not parse as null


def curves(n: int, points: int = 5) -> list:
    return [(f"Learner {i}", list(range(0, 10 * points, 10)), [4.0 - 0.1 * i - 0.01 * s for s in range(points)])
            for i in range(n)]


def test_one_trace_per_learner_named_with_its_steps_and_losses():
    data = figure(class_loss_figure(curves(3)))["data"]
    assert [trace["name"] for trace in data] == ["Learner 0", "Learner 1", "Learner 2"]
    assert data[1]["x"] == [0, 10, 20, 30, 40]
    assert data[1]["y"] == [3.9, 3.89, 3.88, 3.87, 3.86]
    assert all("%{fullData.name}" in trace["hovertemplate"] for trace in data)


def test_the_highlighted_learner_is_drawn_last_thicker_and_named_in_the_title():
    fig = figure(class_loss_figure(curves(4), highlight="Learner 1"))
    data = fig["data"]
    assert data[-1]["name"] == "Learner 1"
    assert all(data[-1]["line"]["width"] > trace["line"]["width"] for trace in data[:-1])
    assert data[-1]["line"]["color"] == room.HIGHLIGHT
    assert "Learner 1" in fig["layout"]["title"]["subtitle"]["text"]
    assert "4 learners" in fig["layout"]["title"]["text"]


def test_an_unknown_highlight_is_ignored():
    fig = figure(class_loss_figure(curves(3), highlight="Nobody"))
    assert [trace["name"] for trace in fig["data"]] == ["Learner 0", "Learner 1", "Learner 2"]
    assert not fig["layout"]["title"].get("subtitle", {}).get("text")


def test_names_are_escaped_not_read_as_html():
    text = class_loss_figure([(HOSTILE, [0, 1], [3.0, 2.0])], highlight=HOSTILE).plot
    gallery = class_maps_figure([(HOSTILE, [[1.0, 0.0], [0.5, 0.5]], ["<b>", "&"])], 0, 0).plot
    for plot in (text, gallery):
        assert "<script>" not in plot
        assert "&lt;script&gt;" in plot
    assert "&lt;b&gt;" in gallery and "<b>" not in gallery
    name = figure(class_loss_figure([(HOSTILE, [0, 1], [3.0, 2.0])]))["data"][0]["name"]
    assert name == "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_non_finite_losses_become_gaps():
    data = figure(class_loss_figure([("Ada", [0, 1, 2, 3], [3.0, math.nan, math.inf, 2.0])]))["data"]
    assert data[0]["y"] == [3.0, None, None, 2.0]


def test_the_legend_shows_for_a_few_learners_only():
    assert figure(class_loss_figure(curves(room.LEGEND_MAX)))["layout"]["showlegend"] is True
    assert figure(class_loss_figure(curves(room.LEGEND_MAX + 1)))["layout"]["showlegend"] is False


def test_max_steps_fixes_the_x_range():
    assert figure(class_loss_figure(curves(2), max_steps=500))["layout"]["xaxis"]["range"] == [0, 500]


def test_long_curves_are_thinned_keeping_both_ends():
    steps = list(range(1000))
    data = figure(class_loss_figure([("Ada", steps, [1.0] * 999 + [0.5])]))["data"]
    assert len(data[0]["x"]) <= room.CLASS_POINTS
    assert data[0]["x"][0] == 0 and data[0]["x"][-1] == 999 and data[0]["y"][-1] == 0.5


def test_no_learner_gives_a_note():
    for plot in (class_loss_figure([]), class_maps_figure([], 0, 0)):
        fig = figure(plot)
        assert fig["data"] == []
        assert room.EMPTY_CLASS in fig["layout"]["annotations"][0]["text"]


def test_two_hundred_learners_of_sixty_points_build():
    fig = figure(class_loss_figure(curves(200, 60), highlight="Learner 7", max_steps=600))
    assert len(fig["data"]) == 200 and fig["data"][-1]["name"] == "Learner 7"


def diagonal(t: int) -> list[list[float]]:
    return [[1.0 if q == k else 0.0 for k in range(t)] for q in range(t)]


def test_the_gallery_has_one_heatmap_per_learner_in_tiles_that_do_not_overlap():
    maps = [(f"Learner {i}", diagonal(4), None) for i in range(8)] + [("Late", None, None)]
    fig = figure(class_maps_figure(maps, 1, 2, columns=3))
    heatmaps = fig["data"]
    assert [trace["type"] for trace in heatmaps] == ["heatmap"] * 8
    assert [trace["name"] for trace in heatmaps] == [f"Learner {i}" for i in range(8)]
    assert heatmaps[3]["z"] == [[100 * w for w in row] for row in diagonal(4)]  # in percent
    assert fig["layout"]["title"]["text"] == "Layer 1, head 2: one map per learner"
    boxes = []
    for trace in heatmaps:
        x, y = fig["layout"][trace["xaxis"].replace("x", "xaxis")], fig["layout"][trace["yaxis"].replace("y", "yaxis")]
        boxes.append((*x["domain"], *y["domain"]))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a[1] <= b[0] or b[1] <= a[0] or a[3] <= b[2] or b[3] <= a[2]
            assert apart, (a, b)
    texts = [note["text"] for note in fig["layout"]["annotations"]]
    assert "Late" in texts and room.NO_MAP in texts
    assert fig["layout"]["height"] >= 3 * room.TILE_PX  # three rows of three


def test_the_gallery_hover_names_tokens_or_positions():
    fig = figure(class_maps_figure([("Ada", diagonal(3), ["a", "b", "a"]), ("Bo", diagonal(3), None)], 0, 0))
    assert fig["data"][0]["x"] == ["#0 a", "#1 b", "#2 a"]  # repeated tokens stay apart
    assert fig["data"][1]["y"] == ["#0", "#1", "#2"]
    assert "%{y} → %{x}: %{z}%" in fig["data"][0]["hovertemplate"]


def test_the_chart_png_has_its_size_and_draws_the_highlight():
    data = curves(20, 40) + [("Ada", list(range(40)), [3.0, math.nan] + [2.0] * 38)]
    image = Image.open(io.BytesIO(class_chart_png(data, "Workshop A", highlight="Ada"))).convert("RGB")
    assert image.size == (1200, 700)
    colours = {colour for _, colour in image.getcolors(maxcolors=1 << 20)}
    highlight = tuple(int(room.HIGHLIGHT[i:i + 2], 16) for i in (1, 3, 5))
    assert highlight in colours and room.PNG_GREY in colours
    plain = Image.open(io.BytesIO(class_chart_png(data, "Workshop A"))).convert("RGB")
    assert highlight not in {colour for _, colour in plain.getcolors(maxcolors=1 << 20)}


def test_an_empty_chart_png_is_still_an_image():
    image = Image.open(io.BytesIO(class_chart_png([("Ada", [0], [math.nan])], "Nobody yet")))
    assert image.size == (1200, 700)
