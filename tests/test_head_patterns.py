"""Each head pattern is declared once (`core.attention.PATTERNS`): the analysis scores and names heads by
it, and the figures give every pattern (and every other label) a colour and a table column keyed by its name."""

import torch

from core.attention import LABELS, PATTERNS, pattern_targets, summarize_heads
from playground.figures import attention as figures


def test_every_label_has_a_colour_and_every_colour_a_label():
    assert set(figures.LABEL_COLORS) == set(LABELS)
    assert LABELS[:len(PATTERNS)] == tuple(PATTERNS) and set(LABELS) - set(PATTERNS) == {"uniform", "mixed"}


def test_every_pattern_has_a_column_its_scores_fill():
    assert set(figures.PATTERN_COLUMNS) == set(PATTERNS)
    ids = [1, 2, 3, 1, 2, 3, 1, 2]
    maps = torch.softmax(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)), -1).tril()
    maps = maps / maps.sum(-1, keepdim=True)
    summaries = summarize_heads(maps, ids, probe=torch.rand(2, 3, generator=torch.Generator().manual_seed(1)))
    row = figures.summary_table(summaries)[0]
    assert len(row) == len(figures.SUMMARY_HEADERS) == len(figures.SUMMARY_WIDTHS)
    for name in PATTERNS:  # each pattern's column shows that pattern's score
        header = figures.PATTERN_COLUMNS[name][0]
        assert row[figures.SUMMARY_HEADERS.index(header)] == f"{summaries[0].scores[name]:.2f}"
        assert f"**{header}**" in figures.SUMMARY_LEGEND
    assert row[figures.SUMMARY_HEADERS.index("probe")] == f"{summaries[0].probe_induction:.2f}"


def test_each_pattern_is_either_targeted_or_searched_and_explains_the_heads_it_names():
    targeted = set(pattern_targets([1, 2, 1, 2]))
    assert targeted == {name for name, p in PATTERNS.items() if p.targets is not None}
    assert set(PATTERNS) - targeted == {"fixed-offset", "mirror"}  # searched over distances and centres
    previous = torch.zeros(1, 1, 6, 6)
    previous[0, 0, 0, 0] = 1
    previous[0, 0, torch.arange(1, 6), torch.arange(5)] = 1  # every token looks at the one before
    summary = summarize_heads(previous, [5, 4, 3, 2, 1, 0])[0]
    assert summary.label == "previous-token" and summary.score >= PATTERNS["previous-token"].threshold
    assert summary.explanation == PATTERNS["previous-token"].sentence.format(share="100%", offset=None, centre=None)
