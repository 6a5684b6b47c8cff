"""A teacher's room over the API with gradio_client, each learner and the teacher a client (a session) of their
own on one running app: open, join, train, the class view, a pushed lesson, the exports, a learner's run in the
teacher's Compare runs, and the close."""

import csv
import io
import json
from pathlib import Path

import pytest
from gradio_client.exceptions import AppError
from PIL import Image

from playground.tabs.room import COLUMNS
from playground.tabs.train.link import LINKED
from support.app import FORM, api_client, serve

pytestmark = pytest.mark.integration


def lesson(**changes) -> list:
    return [{**FORM, **changes}[name] for name in LINKED]


def test_a_room_over_the_api_from_open_to_close():
    with serve() as (demo, url):
        teacher = api_client(url)
        code, key, link = teacher.predict("Tuesday's workshop", "", url, api_name="/open_room")
        assert link == f"{url}?room={code[:4]}-{code[4:]}"
        learners = [api_client(url) for _ in range(3)]
        banners = [learner.predict(code, name, api_name="/join_room")
                   for learner, name in zip(learners, ("Ada", "Zoë", ""))]
        anonymous = [member.name for member in demo.rooms._rooms[code].present][2]
        assert "**Room Tuesday\\'s workshop**" in banners[0] and "**Ada**" in banners[0] and "Zoë" not in banners[0]
        assert f"**{anonymous}**" in banners[2]
        for learner in learners:
            learner.predict(**FORM, api_name="/train")

        counts, _chart, table, names = teacher.predict(code, key, None, 1, api_name="/class_view")
        assert names == ["Ada", "Zoë", anonymous]
        assert table["headers"] == list(COLUMNS)
        rows = {row[0]: dict(zip(COLUMNS, row)) for row in table["data"]}
        assert set(rows) == set(names)
        assert all(row["state"] == "done" and row["step"] == FORM["steps"] and row["loss"] > 0 for row in rows.values())
        assert "**3** joined" in counts and "**3** done" in counts

        said = teacher.predict(code, key, [], ["model"], *lesson(steps=33, learning_rate=0.001),
                               api_name="/push_lesson")
        assert said.startswith("Lesson 1 pushed to 3 learners") and "33" in said and "locks" in said
        newcomer = api_client(url)
        joined = newcomer.predict(code, "Grace", api_name="/join_room")
        assert "The lesson" in joined and "33" in joined and "Ada" not in joined

        csv_path, json_path, png_path = teacher.predict(code, key, api_name="/export_room")
        table_rows = list(csv.reader(io.StringIO(Path(csv_path).read_text(encoding="utf-8"))))
        assert table_rows[0] == list(COLUMNS)
        assert sorted(row[0] for row in table_rows[1:]) == sorted([*names, "Grace"])
        results = json.loads(Path(json_path).read_text(encoding="utf-8"))
        assert results["room"] == "Tuesday's workshop" and len(results["learners"]) == 4
        ada = next(learner for learner in results["learners"] if learner["name"] == "Ada")
        assert ada["state"] == "done" and ada["train_curve"]["steps"][-1] == FORM["steps"]
        assert len(ada["train_curve"]["steps"]) == len(ada["train_curve"]["loss"]) > 1 and ada["val_curve"]["steps"]
        with Image.open(png_path) as chart:
            chart.verify()
            assert chart.format == "PNG" and chart.size[0] >= 400

        assert "Ada" in teacher.predict(code, key, ["Ada"], api_name="/room_to_compare")
        runs = teacher.predict(api_name="/compare_runs")["runs"]
        assert [run["title"] for run in runs] == ["Ada"] and runs[0]["step"] == FORM["steps"]
        assert learners[0].predict(api_name="/compare_runs")["runs"][0]["title"] == ""  # the learner's own: untitled
        with pytest.raises(AppError, match="No learner of this room is called Nobody"):
            teacher.predict(code, key, ["Nobody"], api_name="/room_to_compare")

        assert "closed" in teacher.predict(code, key, api_name="/close_room")
        with pytest.raises(AppError, match="No open room has this code and teacher key"):
            teacher.predict(code, key, None, 1, api_name="/class_view")
        with pytest.raises(AppError, match="No open room has this code"):
            api_client(url).predict(code, "Late", api_name="/join_room")
        assert len(demo.rooms) == 0
