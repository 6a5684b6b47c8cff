"""core.attention: maps from a real model, per-head labels on hand-made patterns, the induction
probe, pooling."""

import math

import pytest
import torch

from core.attention import (
    PROBE_HALF_MAX, attention_maps, entropy_bits, head_view, induction_probe, pattern_targets, pool_attention,
    pool_keys, probe_halves, probe_induction, summarize_heads, token_spans,
)
from core.config import GPTConfig, stage_config
from core.model import GPT, capture_attention


def small_model(**fields) -> GPT:
    return GPT(GPTConfig(**{**dict(vocab_size=11, block_size=16, n_layer=2, n_head=3, n_embd=24), **fields}))


# ---------------------------------------------------------------- hand-made heads (T, T)


def causal_uniform(n: int) -> torch.Tensor:
    rows = torch.ones(n, n).tril()
    return rows / rows.sum(-1, keepdim=True)


def one_hot_rows(n: int, key_of) -> torch.Tensor:
    """Row q puts all its weight on key_of(q) (row 0 can only look at itself)."""
    weights = torch.zeros(n, n)
    weights[0, 0] = 1
    for q in range(1, n):
        weights[q, key_of(q)] = 1
    return weights


REPEATED = [3, 1, 4, 5, 9, 2, 3, 1, 4, 5, 9, 2]  # period 6, no token repeats within a period
# repeats at different distances: only a head that reads content can follow every one of them
SHUFFLED_REPEATS = [0, 1, 2, 3, 4, 5, 6, 2, 3, 4, 0, 1, 5, 6]


def induction_head(ids: list[int]) -> torch.Tensor:
    """Rows with an induction target spread over those targets; the other rows are uniform."""
    weights = causal_uniform(len(ids))
    targets = pattern_targets(ids)["induction"]
    rows = targets.any(-1)
    weights[rows] = targets[rows] / targets[rows].sum(-1, keepdim=True)
    return weights


def mirror_head(n: int, total: int) -> torch.Tensor:
    """Rows whose key total - q is a real look back (1 <= key <= q - 2) put all weight there;
    the other rows are uniform."""
    weights = causal_uniform(n)
    for q in range(n):
        if 1 <= total - q <= q - 2:
            weights[q] = 0
            weights[q, total - q] = 1
    return weights


def stacked(*heads: torch.Tensor) -> torch.Tensor:
    return torch.stack(heads)[None]  # (1, H, T, T)


def in_layer_1(*heads: torch.Tensor) -> torch.Tensor:
    """The heads as layer 1 of a 2-layer model (layer 0 uniform): where an induction head can be."""
    layer_1 = torch.stack(heads)
    return torch.stack([causal_uniform(layer_1.size(-1)).expand_as(layer_1), layer_1])  # (2, H, T, T)


def probe_scores(n_layer: int, n_head: int, value: float) -> torch.Tensor:
    """Every head's induction score on the probe, as `probe_induction` would give it."""
    return torch.full((n_layer, n_head), value)


# ---------------------------------------------------------------- maps from the model


def test_attention_maps_shape_rows_and_causality():
    model = small_model()
    ids = [1, 2, 3, 4, 5, 6, 7]
    maps = attention_maps(model, ids)
    assert maps.shape == (2, 3, 7, 7)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 3, 7), atol=1e-5)
    assert torch.all(maps.triu(diagonal=1) == 0)  # no query sees a later key


def test_attention_maps_agree_with_capture_attention_and_restore_training_mode():
    model = small_model(dropout=0.5)
    model.train()
    ids = [4, 2, 8, 1, 0, 3]
    maps = attention_maps(model, ids)
    assert model.training  # mode restored
    model.eval()
    with capture_attention(model) as patterns, torch.no_grad():
        model(torch.tensor([ids]))
    assert torch.allclose(maps, torch.cat(list(patterns.values())), atol=1e-6)  # eval: no dropout


def test_attention_maps_rejects_bad_input_with_clear_messages():
    model = small_model()
    with pytest.raises(ValueError, match="no tokens"):
        attention_maps(model, [])
    with pytest.raises(ValueError, match="17 tokens.*context is 16"):
        attention_maps(model, [1] * 17)
    bigram = GPT(stage_config("bigram", vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=8))
    with pytest.raises(ValueError, match="no attention"):
        attention_maps(bigram, [1, 2])


def test_head_view_is_one_query_row_and_checks_its_index():
    maps = torch.rand(2, 3, 5, 5)
    assert torch.equal(head_view(maps, 3), maps[:, :, 3, :])
    with pytest.raises(ValueError, match="positions 0 to 4"):
        head_view(maps, 5)


# ---------------------------------------------------------------- summaries


def test_each_textbook_head_gets_its_label():
    ids = SHUFFLED_REPEATS
    n = len(ids)
    heads = [
        one_hot_rows(n, lambda q: q - 1),
        one_hot_rows(n, lambda q: 0),
        torch.eye(n),
        one_hot_rows(n, lambda q: max(q - 3, 0)),
        induction_head(ids),
        mirror_head(n, 13),
        causal_uniform(n),
    ]
    probe = probe_scores(2, 7, 0.0)
    probe[1, 4] = 0.9  # the induction head follows repeats in random text too
    summaries = summarize_heads(in_layer_1(*heads), ids, probe)[7:]
    assert [s.label for s in summaries] == [
        "previous-token", "first-token", "self", "fixed-offset", "induction", "mirror", "uniform",
    ]
    assert [(s.layer, s.head) for s in summaries] == [(1, h) for h in range(7)]
    assert [s.induction_head for s in summaries] == [False] * 4 + [True] + [False] * 2
    assert summaries[0].score == pytest.approx(1.0)
    assert summaries[0].scores["first-token"] == pytest.approx(0.0, abs=0.05)
    assert summaries[3].offset == 3 and summaries[3].scores["fixed-offset"] == pytest.approx(1.0)
    assert summaries[4].scores["induction"] == pytest.approx(1.0)
    assert summaries[4].probe_induction == pytest.approx(0.9)
    assert summaries[4].scores["fixed-offset"] < 0.5  # its look-back distance changes from row to row
    assert "Previous-token head: 100%" in summaries[0].explanation
    assert "3 positions back" in summaries[3].explanation
    assert "Induction head" in summaries[4].explanation and "probe score 0.90" in summaries[4].explanation
    assert "fixed offset" not in summaries[4].explanation
    assert summaries[5].mirror_centre == 6.5 and summaries[5].scores["mirror"] == pytest.approx(1.0)
    assert "Mirror head: 100%" in summaries[5].explanation and "position 6.5" in summaries[5].explanation
    assert all(s.scores["mirror"] < 0.5 for s in summaries[:5])  # no other textbook head looks like one


def test_a_reversal_is_a_mirror_not_a_fixed_offset():
    # "abcdefgh>hgfedcba": each letter of the reversal looks at its mirror in the word, a look-back
    # distance that grows by 2 per row, so no single offset fits
    word = [1, 2, 3, 4, 5, 6, 7, 8]
    ids = word + [0] + word[::-1]
    summary = summarize_heads(stacked(mirror_head(len(ids), 15)), ids)[0]
    assert summary.label == "mirror" and summary.mirror_centre == 7.5
    assert summary.scores["fixed-offset"] < 0.5


def test_mirror_needs_enough_rows():
    summary = summarize_heads(stacked(causal_uniform(5)), [1, 2, 3, 4, 5])[0]
    assert summary.scores["mirror"] is None and summary.mirror_centre is None


def test_on_a_periodic_text_the_probe_decides_between_induction_and_fixed_offset():
    # the token after the earlier occurrence is always 5 back: both readings fit this text
    maps = in_layer_1(induction_head(REPEATED))
    confirmed = summarize_heads(maps, REPEATED, probe_scores(2, 1, 0.8))[1]
    assert confirmed.label == "induction" and confirmed.offset == 5
    assert confirmed.scores["fixed-offset"] > 0.5
    assert "A fixed offset fits this text too" in confirmed.explanation
    assert "reads content, not position" in confirmed.explanation
    # the same map from a head that failed the probe: it reads by position, whatever this text suggests
    refuted = summarize_heads(maps, REPEATED, probe_scores(2, 1, 0.1))[1]
    assert refuted.label == "fixed-offset" and refuted.score == pytest.approx(confirmed.scores["fixed-offset"])
    assert refuted.scores["induction"] > 0.5  # the text's score is still shown as measured
    assert "does not follow the repeats in random tokens written twice (probe score 0.10)" in refuted.explanation


def test_a_layer_0_head_is_never_an_induction_head():
    # layer 0 sees only tokens and positions: it has no earlier head to learn what came before
    maps = stacked(induction_head(SHUFFLED_REPEATS))
    summary = summarize_heads(maps, SHUFFLED_REPEATS, probe_scores(1, 1, 1.0))[0]
    assert summary.scores["induction"] == pytest.approx(1.0)
    assert summary.label != "induction" and not summary.induction_head
    assert "a layer-0 head cannot be one" in summary.explanation


def test_an_induction_head_that_this_text_does_not_show_says_why():
    # the probe's verdict stands whatever the text; the note says what this text shows instead
    no_repeats = list(range(10))
    quiet = summarize_heads(in_layer_1(causal_uniform(10)), no_repeats, probe_scores(2, 1, 0.8))[1]
    assert quiet.induction_head and quiet.label != "induction" and quiet.scores["induction"] is None
    assert "it is an induction head; this text repeats no token for it to follow" in quiet.explanation
    weak = summarize_heads(in_layer_1(causal_uniform(len(REPEATED))), REPEATED, probe_scores(2, 1, 0.8))[1]
    assert weak.induction_head and weak.label == "uniform"
    assert "follows the repeats only weakly (induction score 0.00)" in weak.explanation
    # 5 back on a text of period 6 whose first period repeats a token 3 apart: the offset fits every
    # row, induction all but that one; the offset wins by more than a tie
    ids = [3, 1, 4, 3, 9, 2] * 2
    offset = summarize_heads(in_layer_1(one_hot_rows(len(ids), lambda q: max(q - 5, 0))), ids,
                             probe_scores(2, 1, 0.8))[1]
    assert offset.label == "fixed-offset" and offset.scores["induction"] >= 0.5
    assert "it follows the repeats too (induction score" in offset.explanation
    assert "but fixed-offset fits it better" in offset.explanation


def test_a_faint_induction_head_keeps_the_probes_name_where_induction_fits_best():
    faint = 0.45 * induction_head(REPEATED) + 0.55 * causal_uniform(len(REPEATED))
    summary = summarize_heads(in_layer_1(faint), REPEATED, probe_scores(2, 1, 0.8))[1]
    assert summary.induction_head and summary.label == "induction" and summary.score < 0.5
    unconfirmed = summarize_heads(in_layer_1(faint), REPEATED, probe_scores(2, 1, 0.1))[1]
    assert unconfirmed.label != "induction"  # without the probe's evidence it stays unnamed


def test_without_a_probe_no_head_is_called_induction():
    summary = summarize_heads(in_layer_1(induction_head(REPEATED)), REPEATED)[1]
    assert summary.label == "fixed-offset" and summary.probe_induction is None
    assert "too short to test it" in summary.explanation


def test_a_positional_head_is_not_called_induction_just_because_the_text_repeats():
    # looks 6 back on every row: where a token repeats, that is its earlier occurrence itself,
    # not the token after it, so induction scores low even though the text repeats
    ids = [7, 8] + REPEATED
    maps = in_layer_1(one_hot_rows(len(ids), lambda q: max(q - 6, 0)))
    summary = summarize_heads(maps, ids, probe_scores(2, 1, 0.0))[1]
    assert summary.label == "fixed-offset" and summary.offset == 6
    assert summary.scores["fixed-offset"] > summary.scores["induction"] + 0.05


def test_uniform_attention_scores_zero_on_every_pattern():
    """Chance correction: spreading evenly is not following a pattern."""
    summary = summarize_heads(stacked(causal_uniform(12)), REPEATED)[0]
    assert all(score == pytest.approx(0.0, abs=1e-5) for score in summary.scores.values())
    assert summary.normalized_entropy == pytest.approx(1.0)


def test_entropy_in_bits_and_normalised():
    n = 8
    entropy, normalized = entropy_bits(stacked(causal_uniform(n), torch.eye(n)))
    expected = sum(math.log2(q + 1) for q in range(n)) / n
    assert entropy[0, 0] == pytest.approx(expected, rel=1e-5)
    assert normalized[0, 0] == pytest.approx(1.0)
    assert entropy[0, 1] == pytest.approx(0.0) and normalized[0, 1] == pytest.approx(0.0)


def test_a_head_with_no_clear_pattern_is_mixed():
    # half on the previous token, half on the token two back: no pattern dominates, not uniform
    n = 12
    weights = (one_hot_rows(n, lambda q: q - 1) + one_hot_rows(n, lambda q: max(q - 2, 0))) / 2
    summary = summarize_heads(stacked(weights), list(range(n)))[0]
    assert summary.label == "mixed"
    assert "closest: previous-token" in summary.explanation


def test_induction_is_not_measured_without_repeats():
    ids = list(range(10))
    assert not pattern_targets(ids)["induction"].any()
    # nearly uniform with a faint look two back: fixed-offset is the closest pattern, induction absent
    weights = 0.97 * causal_uniform(10) + 0.03 * one_hot_rows(10, lambda q: max(q - 2, 0))
    summary = summarize_heads(stacked(weights), ids)[0]
    assert summary.scores["induction"] is None
    assert summary.label == "uniform"


def test_induction_targets_skip_ambiguous_keys():
    # "a b a": at the second a the token after the first a is also the previous token: left out
    assert not pattern_targets([0, 1, 0])["induction"].any()
    targets = pattern_targets([0, 1, 2, 0])["induction"]
    assert targets[3].tolist() == [False, True, False, False]


def test_fixed_offset_needs_four_tokens():
    summary = summarize_heads(stacked(causal_uniform(3)), [1, 2, 3])[0]
    assert summary.scores["fixed-offset"] is None and summary.offset is None
    assert summary.label == "uniform"


def test_summaries_reject_mismatched_or_too_short_input():
    with pytest.raises(ValueError, match="3 tokens but 4"):
        summarize_heads(torch.rand(1, 1, 3, 3), [1, 2, 3, 4])
    with pytest.raises(ValueError, match="at least 2 tokens"):
        summarize_heads(torch.ones(1, 1, 1, 1), [1])
    with pytest.raises(ValueError, match=r"probe scores are \(2, 2\) but the maps have \(1, 1\)"):
        summarize_heads(stacked(causal_uniform(4)), [1, 2, 3, 4], probe_scores(2, 2, 0.0))


def test_induction_probe_repeats_random_tokens_and_is_seeded():
    probe = induction_probe(50, 20, seed=3)
    assert len(probe) == 40 and probe[:20] == probe[20:]
    assert all(0 <= token < 50 for token in probe)
    assert probe == induction_probe(50, 20, seed=3) != induction_probe(50, 20, seed=4)
    with pytest.raises(ValueError):
        induction_probe(50, 0)


def test_probe_halves_are_two_lengths_that_fit_the_context():
    assert probe_halves(32) == (11, 16)  # neither repeat is 9, the copy task's period
    assert probe_halves(8) == (3, 4)
    assert probe_halves(1024) == (27, PROBE_HALF_MAX)
    assert probe_halves(7) is None and probe_halves(3) is None  # no room for two lengths of 3 or more


class ForcedHeads:
    """Forward hooks that overwrite heads of a model with textbook patterns of the text it reads."""

    def __init__(self, model: GPT) -> None:
        self.model = model
        self.ids: list[int] = []
        model.register_forward_pre_hook(self._remember)

    def _remember(self, module, inputs) -> None:
        self.ids = inputs[0][0].tolist()

    def force(self, layer: int, head: int, make) -> None:
        def hook(module, inputs, pattern):
            pattern = pattern.clone()
            pattern[:, head] = make(self.ids)
            return pattern

        self.model.blocks[layer].attn.hook_pattern.register_forward_hook(hook)


def test_probe_tells_an_induction_head_from_a_fixed_offset_head():
    model = small_model(block_size=32, n_head=3)
    forced = ForcedHeads(model)
    forced.force(1, 0, induction_head)  # reads content
    forced.force(1, 1, lambda ids: one_hot_rows(len(ids), lambda q: max(q - 10, 0)))  # reads position
    forced.force(0, 2, induction_head)  # reads content, but in layer 0
    scores = probe_induction(model)
    assert scores.shape == (2, 3)
    assert scores[1, 0] > 0.9 and scores[0, 2] > 0.9
    # 10 back is the repeat of the 11-token half, not of the 16-token one: the weaker probe counts
    assert scores[1, 1] < 0.2
    assert torch.equal(scores, probe_induction(model))  # seeded: one model, one verdict
    ids = SHUFFLED_REPEATS
    summaries = summarize_heads(attention_maps(model, ids), ids, scores)
    assert [(s.layer, s.head) for s in summaries if s.induction_head] == [(1, 0)]
    assert [(s.layer, s.head) for s in summaries if s.label == "induction"] == [(1, 0)]


def test_probe_needs_a_context_with_room_for_two_repeat_lengths():
    assert probe_induction(small_model(block_size=7)) is None


# ---------------------------------------------------------------- pooling for display


def test_token_spans_cover_every_token_once():
    spans = token_spans(10, 4)
    assert spans == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert token_spans(5, 8) == [(i, i + 1) for i in range(5)]


def test_pool_keys_sums_groups():
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0]])
    pooled, spans = pool_keys(weights, 3)
    assert spans == [(0, 2), (2, 4), (4, 5)]
    assert torch.allclose(pooled, torch.tensor([[0.3, 0.7, 0.0]]))


def test_pool_attention_keeps_rows_distributions_and_averages_query_groups():
    maps = torch.softmax(torch.randn(2, 3, 10, 10), -1) * torch.ones(10, 10).tril()
    maps = maps / maps.sum(-1, keepdim=True)
    pooled, spans = pool_attention(maps, 4)  # groups of 3: (0,3) (3,6) (6,9) (9,10)
    assert pooled.shape == (2, 3, 4, 4)
    assert torch.allclose(pooled.sum(-1), torch.ones(2, 3, 4), atol=1e-5)
    expected = maps[1, 2, 3:6, 6:9].sum(-1).mean()  # query group 1 -> key group 2
    assert pooled[1, 2, 1, 2] == pytest.approx(float(expected), rel=1e-5)
    assert pooled[1, 2, 3, 3] == pytest.approx(float(maps[1, 2, 9, 9]), rel=1e-5)  # the short last group


def test_pooling_is_a_no_op_when_the_map_already_fits():
    maps = torch.rand(1, 1, 6, 6)
    pooled, spans = pool_attention(maps, 6)
    assert torch.equal(pooled, maps) and len(spans) == 6
