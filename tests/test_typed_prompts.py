"""What a learner types on the Generate tab gets the answer the texts promise (issue 29).

The README's and the task presets' examples show right answers; and the default screen's first lesson
holds: Train with the form as the page opens, then Generate at temperature 0 from those examples typed
exactly as shown and from 20 random words: every copy right. Before, the first letter came out wrong
unless the prompt began with the line break every training line came after.

Here the default screen's own seed, end to end through the tabs' handlers (a few seconds). Every task
preset at its default steps on 3 seeds takes minutes: that is tests/bench/bench_tasks.py (the same
examples and random questions), its figures in tests/bench/README.md.
"""

import dataclasses
import random

import pytest

from bench.bench_tasks import README, preset_examples, shown_examples
from core.data import CORPORA
from core.presets import PRESETS
from playground.context import AppContext
from playground.sessions import SessionRegistry
from playground.settings import Settings
from playground.tabs.generate import GenerateHandlers
from playground.tabs.train import TrainHandlers

TASK_PRESETS = ("repeat", "induction", "reverse", "sort")
N_RANDOM_WORDS = 20


@pytest.mark.parametrize("name", TASK_PRESETS)
def test_the_texts_show_each_task_with_right_answers(name):
    task = CORPORA[PRESETS[name].corpus].task
    shown = shown_examples(task, README.read_text()) + shown_examples(task, PRESETS[name].description)
    assert shown and all(answer in ("", task.answer(question)) for question, answer in shown)  # '': a prompt
    assert preset_examples("repeat") == ["qwhzbkad", "abcdefgh"]  # the README's, then the preset's


def test_the_default_lesson_copies_what_a_learner_types():
    ctx = AppContext(settings=Settings(), registry=SessionRegistry(10**9, 600), model_changed=None, tabs=None)
    train = TrainHandlers(ctx)
    form = train.rules.default_form()
    assert (form.preset, form.corpus, form.steps, form.seed) == ("repeat", "repeat", 250, 1337)
    status = list(train.run.train(**dataclasses.asdict(form), request="learner"))[-1][0]
    assert status.startswith("Done: 250 steps")

    task, generate = CORPORA["repeat"].task, GenerateHandlers(ctx).generate
    rng = random.Random("typed questions")
    questions = preset_examples("repeat") + [task.question(rng) for _ in range(N_RANDOM_WORDS)]
    wrong = {}
    for question in questions:
        prompt = question + task.separator  # typed as the texts show it: no line break before it
        _, text, _ = list(generate(prompt, task.longest + 1, 0.0, 0, 1.0, -1, request="learner"))[-1]
        if text != f"\n{prompt}{question}\n":  # the line break the tab puts before it, the copy, the line's end
            wrong[prompt] = text
    assert wrong == {}
