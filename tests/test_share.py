"""The teacher's link (playground/tabs/train/link.py): a query sets up the form by the form's own rules, ignores
and names what is unknown or invalid, and the link made from a form opens as that same form."""

from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import pytest

from core.presets import PRESETS
from playground.tabs.train import link as share
from playground.settings import Settings
from playground.tabs.train.form import FORM_FIELDS, FormRules

BASE = "http://192.168.1.20:7860/"


@pytest.fixture(scope="module")
def handlers():
    return FormRules(Settings())  # the link reads forms by the form's rules (TrainHandlers(ctx).rules)


def query(url: str) -> list[tuple[str, str]]:
    """A link's query as the server decodes it."""
    return parse_qsl(urlsplit(url).query, keep_blank_values=True)


def test_groups_hold_every_field_but_the_preset_once():
    grouped = [name for fields in share.GROUPS.values() for name in fields]
    assert sorted(grouped) == sorted(set(FORM_FIELDS) - {"preset"})
    assert share.LINKED[0] == "preset" and not set(share.NOT_LINKED) & set(share.LINKED)


def test_the_preset_applies_first_and_the_fields_override_it(handlers):
    setup = share.parse(query("/?preset=sort&seed=7&n_layer=3&hide=training&lock=model"), handlers)
    assert setup.ignored == () and setup.applied == ("preset", "n_layer", "seed")
    assert setup.values == {**share.preset_values(handlers, "sort"), "seed": 7, "n_layer": 3}
    assert setup.values["corpus"] == "sort" and setup.values["n_head"] == 4
    assert setup.view == share.View(hide=("training",), lock=("model",))
    assert setup.view.locked_fields == ("stage", "n_layer", "n_head", "n_embd", "block_size", "dropout", "causal",
                                        "scale_attention", "use_position_embedding")


def test_no_query_is_the_default_form(handlers):
    setup = share.parse([], handlers)
    assert setup.values == share.preset_values(handlers, "repeat")
    assert setup.view == share.View() and setup.ignored == ()


def test_values_read_as_the_form_holds_them(handlers):
    setup = share.parse(query("/?learning_rate=0.0005&dropout=0.1&steps=1e3&tokenizer=gpt2&stage=one_head"),
                        handlers)
    assert setup.ignored == ()
    assert (setup.values["learning_rate"], setup.values["dropout"]) == (0.0005, 0.1)
    assert setup.values["steps"] == 1000 and isinstance(setup.values["steps"], int)
    assert (setup.values["tokenizer"], setup.values["stage"]) == ("gpt2", "one_head")


@pytest.mark.parametrize("key, value, why", [
    ("n_layer", "99", "Layers must be at most 6, got 99."),  # over the server's cap; its advice is left out
    ("n_layer", "2.5", "whole number"),
    ("n_head", "0", "at least 1"),
    ("learning_rate", "nan", "finite"),
    ("learning_rate", "1e999", "finite"),
    ("seed", "-1", "at least 0"),
    ("seed", "0x10", "must be a number"),
    ("steps", "9" * 500, "finite"),
    ("corpus", "../../etc/passwd", "Corpus must be one of"),
    ("tokenizer", "1", "Tokenizer must be one of"),
    ("preset", "../../etc", "Preset must be one of"),
])
def test_an_invalid_value_is_ignored_and_named(handlers, key, value, why):
    setup = share.parse([(key, value), ("n_embd", "64")], handlers)
    assert setup.values == {**share.preset_values(handlers, "repeat"), "n_embd": 64}  # the rest still applies
    [ignored] = setup.ignored
    assert ignored.startswith(f"{key}={value[:share.SHOWN_CHARS]}") and why in ignored
    assert "--no-caps" not in ignored


def test_unknown_keys_and_groups_are_ignored_and_named(handlers):
    setup = share.parse([("hide", "<script>,model,model"), ("lock", ",,data"), ("upload", "/etc/passwd"),
                         ("text", "hello"), ("x" * 100, "1")], handlers)
    assert setup.view == share.View(hide=("model",), lock=("data",))
    assert setup.values == share.preset_values(handlers, "repeat")  # no path, no text from a link
    assert setup.ignored == ("hide=<script> (the groups are data, model, training, modern)", "upload (not a setting)",
                             "text (not a setting)", f"{'x' * share.SHOWN_CHARS}... (not a setting)")


def test_a_repeated_field_takes_its_last_value(handlers):
    assert share.parse([("n_layer", "1"), ("n_layer", "3")], handlers).values["n_layer"] == 3


def test_a_paste_corpus_is_kept_for_the_learner_to_fill(handlers):
    setup = share.parse([("corpus", "paste"), ("block_size", "8")], handlers)
    assert setup.ignored == () and setup.values["corpus"] == "paste" and setup.values["text"] == ""


def test_an_overlong_query_is_ignored_whole(handlers):
    setup = share.parse([("n_layer", "3"), ("seed", "1" * share.MAX_QUERY_CHARS)], handlers)
    assert setup.values == share.preset_values(handlers, "repeat") and setup.view == share.View()
    [ignored] = setup.ignored
    assert "the whole link" in ignored and f"at most {share.MAX_QUERY_CHARS:,}" in ignored
    assert share.note(setup).startswith("⚠️ Ignored from the link: the whole link")  # it set up nothing


def test_the_link_names_the_preset_the_seed_and_what_differs(handlers):
    values = {**share.preset_values(handlers, "sort"), "seed": 7, "n_layer": 3.0, "learning_rate": 0.0005}
    url = share.link(BASE, values, share.View(hide=("training",), lock=("model", "data")), handlers)
    assert url == (f"{BASE}?preset=sort&seed=7&n_layer=3&learning_rate=0.0005&hide=training&lock=model,data")


@pytest.mark.parametrize("preset", list(PRESETS))
def test_link_form_link_round_trip(handlers, preset):
    values = {**share.preset_values(handlers, preset), "seed": 42, "n_layer": 1, "dropout": 0.15,
              "learning_rate": 1e-6, "tokenizer": "gpt2", "corpus": "reverse"}
    view = share.View(hide=("data",), lock=("training",))
    url = share.link(BASE, values, view, handlers)
    setup = share.parse(query(url), handlers)
    assert setup.ignored == () and setup.view == view
    assert {name: setup.values[name] for name in share.LINKED} == {name: values[name] for name in share.LINKED}
    assert share.link(BASE, setup.values, setup.view, handlers) == url


def test_the_default_form_links_to_its_preset_and_seed_alone(handlers):
    url = share.link(BASE, share.preset_values(handlers, "repeat"), share.View(), handlers)
    assert url == f"{BASE}?preset=repeat&seed=1337"


@pytest.mark.parametrize("change, message", [
    (dict(n_layer=99), "Layers must be at most 6"),
    (dict(preset="nope"), "Preset must be one of"),
    (dict(seed=None), "Seed must be a number"),
])
def test_an_invalid_form_makes_no_link(handlers, change, message):
    with pytest.raises(gr.Error, match=message):
        share.link(BASE, {**share.preset_values(handlers, "repeat"), **change}, share.View(), handlers)


@pytest.mark.parametrize("base", ["javascript:alert(1)//", "", None, "http://x/" + "a" * share.MAX_QUERY_CHARS])
def test_the_page_address_must_be_a_web_address(handlers, base):
    with pytest.raises(gr.Error):
        share.link(base, share.preset_values(handlers, "repeat"), share.View(), handlers)


def test_the_note_shows_the_link_as_text_never_markup(handlers):
    setup = share.parse([("hide", "<script>alert(1)</script>"), ("lock", "model"), ("**bold**", "[x](y)")],
                        handlers)
    text = share.note(setup)
    assert text.startswith("This page's link set up the form. It locks **Model**")
    assert "<script>" not in text and "\\<script\\>" in text and "\\*\\*bold\\*\\*" in text
    assert "\n" not in text.split("\n\n", 1)[1]  # the ignored parts: one line


def test_a_stage_leaves_a_locked_heads_slider_locked():
    def unlock(stage):
        return gr.update(interactive=True, info=None)

    handler = share.keeping_locks(unlock, "n_head")
    assert handler("gpt", share.View(lock=("model",)))["interactive"] is False
    assert handler("gpt", share.View(lock=("training",)))["interactive"] is True
