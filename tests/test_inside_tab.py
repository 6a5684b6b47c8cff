"""Inside a head on the Attention tab: the step-by-step, knock-out, logit-lens and export handlers as
plain functions. What they show must be the model's own numbers, and what they refuse, refused
with a message that names the field."""

import csv
import dataclasses
import json
import math
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import torch

from core.attention import attention_maps
from core.interventions import ablate, head_importance, head_steps
from core.sample import generate
from playground.sessions import TrainedModel
from playground.tabs import attention as tab
from playground.tabs.attention import export, knockouts
from playground.tabs.attention import steps as steps_section
from support.handlers import give_model, make_attention_ctx

TEXT = "abcab|abcab"  # 11 tokens of the test vocabulary
N_TOKENS = 11


@pytest.fixture
def session(attention_ctx, handlers):
    """Alice's session with a lively untrained model (2 layers, 3 heads) and TEXT analysed."""
    session = give_model(attention_ctx)
    with torch.no_grad():  # larger weights than GPT-2's N(0, 0.02): heads that attend unevenly
        for parameter in session.model.parameters():
            parameter.mul_(8 if parameter.dim() == 2 else 1)
    handlers.analysis.analyse(TEXT, "alice")
    return session


def column(fig, header: str) -> list[float]:
    """A step-by-step table's column as the exact numbers its hover shows."""
    trace = fig.data[0]
    c = list(trace.x).index(header)
    return [-math.inf if row[c].startswith("−∞") else float(row[c]) for row in trace.customdata]


# ---------------------------------------------------------------- step by step


def test_the_weights_shown_are_the_heatmaps_row_and_the_models_own(handlers, session):
    exact = attention_maps(session.model, session.attention.ids)
    for layer, head, query in [(0, 0, 0), (1, 2, 5), (1, 1, 10)]:
        note, table, vectors = handlers.steps.head_steps(layer, head, query, False, False, "alice")
        shown = torch.tensor(column(table, "softmax"))
        assert torch.allclose(shown, session.attention.weights()[layer, head, query], atol=1e-3)  # the heatmap's row
        assert torch.allclose(shown, exact[layer, head, query], atol=1e-6, rtol=0)  # the model's, to the digit
        assert list(table.data[0].x) == ["q·k", "÷√8", "+ mask", "softmax"]  # head size 24 / 3
        assert f"Layer {layer}, head {head}" in note and "softmax" in note
        steps = head_steps(session.model, session.attention.ids, layer, head, query)
        assert column(table, "q·k") == pytest.approx(steps.scores.tolist(), abs=1e-6)
        assert column(table, "+ mask")[query + 1:] == [-math.inf] * (N_TOKENS - query - 1)
        assert table.data[0].text[query][3] == f"{steps.weights[query].item():.3f}"  # rounded in the cell
        panels = [trace.hovertemplate.split("<br>")[0] for trace in vectors.data]
        assert panels[1:] == ["keys k", "values × their weight", "output: the sum of the rows above"]
        assert torch.allclose(torch.tensor(vectors.data[3].z[0]), steps.output, atol=1e-6)


def test_the_toggles_add_the_weights_without_the_scale_and_without_the_mask(handlers, session):
    note, table, _ = handlers.steps.head_steps(1, 0, 4, True, True, "alice")
    steps = head_steps(session.model, session.attention.ids, 1, 0, 4)
    assert list(table.data[0].x)[4:] == ["no ÷√8", "no mask"]
    assert column(table, "no ÷√8") == pytest.approx(steps.weights_unscaled.tolist(), abs=1e-6)
    assert column(table, "no mask") == pytest.approx(steps.weights_unmasked.tolist(), abs=1e-6)
    assert "Without ÷√d" in note and "later tokens (#5 to #10)" in note
    last = handlers.steps.head_steps(1, 0, N_TOKENS - 1, False, True, "alice")[0]
    assert "nothing changes for the last token" in last and "Without ÷√d" not in last
    past_only = dataclasses.replace(steps, weights_unmasked=steps.weights)  # a head that looks back anyway
    assert "would still put almost nothing (0.0e+00) on later tokens" in steps_section._steps_note(
        past_only, session.attention.labels, False, True)


def test_the_steps_follow_the_pickers_once_shown(handlers, session):
    assert all(out == gr.skip() for out in handlers.steps.follow_pickers(0, 1, 3, False, False, "alice"))
    handlers.steps.head_steps(0, 0, 2, False, False, "alice")
    note, table, _ = handlers.steps.follow_pickers(1, 2, 3, False, False, "alice")
    assert "query #3 a" in table.layout.title.text and note.startswith("**Layer 1, head 2")
    with handlers.ctx.registry.job("alice", "training"):  # moving a picker while it trains: no message
        assert handlers.steps.follow_pickers(0, 0, 1, False, False, "alice")[0] == gr.skip()
    handlers.analysis.analyse("abc", "alice")  # a new analysis: the steps wait for their button again
    assert handlers.steps.follow_pickers(0, 0, 1, False, False, "alice")[0] == gr.skip()


def test_the_tools_refuse_once_the_model_has_changed(handlers, session):
    trained = session.trained
    trained.history.append({"step": 10})  # trained further
    with pytest.raises(gr.Error, match="model has changed since this analysis"):
        handlers.steps.head_steps(0, 0, 0, False, False, "alice")
    trained.history.clear()
    handlers.steps.head_steps(0, 0, 0, False, False, "alice")  # the same model at the same step again
    session.trained = TrainedModel(trained.model, trained.tokenizer, "another")  # replaced (here by the same weights)
    for call in (lambda: handlers.lens.lens(5, "alice"), lambda: handlers.knockouts.knock_out([], "zero", "alice"),
                 lambda: handlers.export.export("alice")):
        with pytest.raises(gr.Error, match="press Analyse again"):
            call()
    assert handlers.steps.follow_pickers(0, 0, 1, False, False, "alice")[0] == gr.skip()
    assert session.job_name is None


# ---------------------------------------------------------------- knock-outs


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_knocking_out_every_head_of_a_layer_matches_core(handlers, session, mode):
    model, ids = session.model, session.attention.ids
    names = ["L1 H2", "L1 H0", "L1 H1"]
    note, intact, knocked = handlers.knockouts.knock_out(names, mode, "alice")
    idx = torch.tensor([ids])
    with torch.no_grad(), ablate(model, [(1, 0), (1, 1), (1, 2)], mode, over=ids):  # means over the text
        loss = model(idx[:, :-1], idx[:, 1:])[1].item()
        expected = generate(model, idx, knockouts.CONTINUATION_TOKENS, temperature=0, use_cache=False)[0, len(ids):]
    assert knocked == session.tokenizer.decode(expected.tolist())
    assert intact == session.tokenizer.decode(generate(model, idx, knockouts.CONTINUATION_TOKENS, temperature=0)[0, len(ids):]
                                              .tolist())
    assert f"**{loss:.4f}**" in note and "**L1 H0, L1 H1, L1 H2**" in note and knockouts.MODE_NAMES[mode] in note
    result = session.attention.results["knock_out"]
    assert result["heads"] == ["L1 H0", "L1 H1", "L1 H2"] and result["loss_after"] == pytest.approx(loss, abs=1e-6)
    assert not model.blocks[1].attn.hook_z._forward_hooks  # the knock-out ends with the call


def test_no_head_picked_gives_the_loss_alone(handlers, session):
    note, intact, knocked = handlers.knockouts.knock_out([], "zero", "alice")
    assert note.startswith("No head picked") and intact == knocked == ""


def test_importance_of_every_head_is_cores_and_kept_per_mode(handlers, session, monkeypatch):
    fig = handlers.knockouts.importance("mean", "alice")
    expected = head_importance(session.model, session.attention.ids, "mean")
    assert np.asarray(fig.data[0].z).shape == (2, 3)
    assert torch.allclose(torch.tensor(fig.data[0].z), expected, atol=1e-5)
    assert list(fig.data[0].x) == ["H0", "H1", "H2"] and list(fig.data[0].y) == ["L0", "L1"]
    monkeypatch.setattr(knockouts, "head_importance", lambda *args: pytest.fail("computed twice"))
    handlers.knockouts.importance("mean", "alice")  # kept for this analysis


@pytest.mark.parametrize("heads, message", [
    ("L0 H0", "Heads must be a list"), ([5], "each is a name like"), (["l0 h0"], "each is a name like"),
    (["L0 H0 "], "each is a name like"), (["L2 H0"], "no L2 H0"), (["L0 H3"], "no L0 H3"),
    (["L0 H1", "L0 H1"], "L0 H1 is listed twice"), (["L0 H0"] * 10_000, "lists 10,000 heads; this model has 6"),
    (["L" + "9" * 5000 + " H0"], "each is a name like"),
])
def test_knock_out_checks_the_heads(handlers, session, heads, message):
    with pytest.raises(gr.Error, match=message):
        handlers.knockouts.knock_out(heads, "zero", "alice")
    assert session.job_name is None


@pytest.mark.parametrize("mode", ["max", None, 1, ["zero"]])
def test_knock_out_and_importance_check_the_mode(handlers, session, mode):
    for call in (lambda: handlers.knockouts.knock_out(["L0 H0"], mode, "alice"),
                 lambda: handlers.knockouts.importance(mode, "alice")):
        with pytest.raises(gr.Error, match="Mode must be one of zero, mean"):
            call()


# ---------------------------------------------------------------- the logit lens


def test_the_lens_last_row_is_the_models_prediction(handlers, session):
    note, fig = handlers.lens.lens(3, "alice")
    model, ids = session.model, session.attention.ids
    logits = model.eval()(torch.tensor([ids]))[0][0]  # (T, V)
    probs = torch.softmax(logits, -1)
    trace = fig.data[0]
    assert list(trace.y) == ["embeddings", "layer 0", "layer 1"]
    labels = [session.tokenizer.token_label(i) for i in probs.argmax(-1).tolist()]
    assert list(trace.text[-1]) == labels  # the top guess of the output, at every position
    truth = probs[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    assert torch.allclose(torch.tensor(trace.z[-1][:-1]), truth, atol=1e-6)
    assert math.isnan(trace.z[-1][-1])  # nothing follows the last token
    assert trace.customdata[-1][0].count("<br>") == 2 + 3  # depth and truth, "top:", then 3 predictions
    assert "of the 10 positions" in note and "layer 1 **" in note


@pytest.mark.parametrize("top_k, message", [
    (0, "at least 1"), (11, "at most 10"), ("x", "must be a number"), (math.nan, "finite"), (2.5, "whole"),
    (1e9, "at most 10"), (None, "must be a number"),
])
def test_the_lens_checks_top_k(handlers, session, top_k, message):
    with pytest.raises(gr.Error, match=f"Top predictions .*{message}"):
        handlers.lens.lens(top_k, "alice")


# ---------------------------------------------------------------- step-by-step inputs


@pytest.mark.parametrize("args, message", [
    ((1e9, 0, 0, False, False), "Layer must be at most 1"), (("a", 0, 0, False, False), "Layer must be a number"),
    ((0, -1, 0, False, False), "Head must be at least 0"), ((0, 0, 11, False, False), "Query token must be at most 10"),
    ((0, 0, None, False, False), "Query token must be a number"),
    ((0, 0, 0, "yes", False), "Without ÷√d must be true or false"),
    ((0, 0, 0, False, [1] * 10_000), "Without the mask must be true or false"),
])
def test_head_steps_checks_its_inputs(handlers, session, args, message):
    with pytest.raises(gr.Error, match=message):
        handlers.steps.head_steps(*args, "alice")
    assert session.job_name is None


def test_the_tools_need_an_analysis(attention_ctx, handlers):
    give_model(attention_ctx, "bob")
    for call in (lambda: handlers.steps.head_steps(0, 0, 0, False, False, "bob"), lambda: handlers.lens.lens(5, "bob"),
                 lambda: handlers.knockouts.knock_out([], "zero", "bob"), lambda: handlers.export.export("bob")):
        with pytest.raises(gr.Error, match="Analyse a text first"):
            call()


# ---------------------------------------------------------------- export


def test_the_export_parses_back_and_is_named_by_the_app(attention_ctx):
    handlers = tab.AttentionHandlers(attention_ctx)
    hostile_key = "../../etc/x"  # a client's session hash: never part of a path
    session = give_model(attention_ctx, hostile_key)
    handlers.analysis.analyse(TEXT, hostile_key)
    handlers.steps.head_steps(1, 2, 5, False, False, hostile_key)
    handlers.knockouts.knock_out(["L0 H1"], "zero", hostile_key)
    handlers.knockouts.importance("zero", hostile_key)
    handlers.lens.lens(5, hostile_key)
    note, paths = handlers.export.export(hostile_key)
    assert note == ""
    paths = [Path(p) for p in paths]
    assert [p.name for p in paths] == list(export.EXPORT_NAMES.values())
    assert {p.parent for p in paths} == {handlers.export.scratch / session.id}
    assert all("etc" not in str(p) and ".." not in str(p) for p in paths)

    exact = attention_maps(session.model, session.attention.ids)
    weights = np.load(paths[0])
    assert weights.dtype == np.float32 and weights.shape == (2, 3, N_TOKENS, N_TOKENS)
    assert np.array_equal(weights, exact.numpy())
    with paths[1].open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["layer", "head", "query", "key", "query_token", "key_token", "weight"]
    assert len(rows) == 2 * 3 * N_TOKENS * (N_TOKENS + 1) // 2  # every key at or before its query
    labels = session.attention.labels
    for row in rows[::17]:
        layer, head, query, key = (int(row[name]) for name in ("layer", "head", "query", "key"))
        assert key <= query and np.float32(row["weight"]) == exact[layer, head, query, key].numpy()  # 9 digits: exact
        assert (row["query_token"], row["key_token"]) == (labels[query], labels[key])
    document = json.loads(paths[2].read_text(encoding="utf-8"))
    assert document["text"] == TEXT and document["tokens"] == session.attention.labels
    assert len(document["summaries"]) == 6 and document["model"]["n_layer"] == 2
    assert document["head_steps"]["query"] == 5 and len(document["head_steps"]["k"]) == N_TOKENS
    assert document["knock_out"]["heads"] == ["L0 H1"] and set(document["importance"]) == {"zero"}
    assert np.array(document["logit_lens"]["top_ids"]).shape == (3, N_TOKENS, 5)

    handlers.export.export(hostile_key)  # a second export replaces the first
    folder = handlers.export.scratch / session.id
    assert sorted(p.name for p in folder.iterdir()) == sorted(export.EXPORT_NAMES.values())
    handlers.export.free(session)  # and the session's end deletes them
    assert not folder.exists()


def test_an_export_too_large_for_a_csv_leaves_it_out(handlers, session, monkeypatch):
    monkeypatch.setattr(export, "MAX_CSV_ROWS", 100)
    note, paths = handlers.export.export("alice")
    assert [Path(p).name for p in paths] == [export.EXPORT_NAMES["npy"], export.EXPORT_NAMES["json"]]
    assert "The .csv is left out: it would have 396 rows (at most 100)" in note


def test_a_new_analysis_offers_its_heads_and_clears_the_tools(handlers, session):
    picker, *cleared = handlers.reset_tools("alice")
    assert [value for _, value in picker.choices] == ["L0 H0", "L0 H1", "L0 H2", "L1 H0", "L1 H1", "L1 H2"]
    assert picker.value == [] and all(value in ("", None) for value in cleared)


def test_importance_keeps_to_the_servers_budget_on_a_large_model(session):
    from core.interventions import importance_macs

    config = session.model.config
    budget = importance_macs(config, 6)  # what 6 of the 11 tokens cost, in multiply-adds
    attention_ctx = make_attention_ctx(max_attention_tokens=20, max_importance_gmacs=budget / 1e9)
    handlers = tab.AttentionHandlers(attention_ctx)
    attention_ctx.registry.get("alice").trained = session.trained
    handlers.analysis.analyse(TEXT, "alice")
    fig = handlers.knockouts.importance("zero", "alice")
    assert "first 6 of 11 tokens" in fig.layout.title.subtitle.text
    expected = head_importance(session.model, attention_ctx.registry.get("alice").attention.ids[:6], "zero")
    assert np.allclose(np.array(fig.data[0].z, dtype=np.float32), expected.numpy(), atol=1e-6)
    _, files = handlers.export.export("alice")
    document = json.loads(Path(next(f for f in files if f.endswith(".json"))).read_text())
    assert document["importance_tokens"] == 6 and len(document["importance"]["zero"]) == 2
