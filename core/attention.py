"""Looking inside attention: every head's weights on one text, and what each head does.

Shapes: L layers, H heads, T tokens. A map is (L, H, T, T): row q is where query token q
looks, a probability distribution over keys 0..q (the causal mask zeroes the rest).

Each head is summarised by its entropy and by how strongly it follows a few well-known
patterns (Olsson et al., "In-context Learning and Induction Heads", 2022):
- previous-token: looks at the token just before,
- first-token: parks attention on the first token (an "attention sink"),
- self: looks at the current token itself,
- fixed-offset: looks a fixed number (2 or more) of tokens back, by position not content,
- induction: looks at the token that followed an earlier occurrence of the current token.
  On a text that repeats with one period this is also a fixed offset, so the label needs
  evidence from outside the text: `probe_induction` runs the model on random tokens written
  twice, at two repeat lengths (a head that reads by position matches at most one), and
  only a head past layer 0 can be one (it composes with a previous-token head before it),
- mirror: looks as far before a centre as the current token is after it (query + key fixed),
  the anti-diagonal that writes a word backwards,
- uniform: spreads attention evenly, i.e. averages everything before.

A pattern's score is chance-corrected: 0 means no more weight on the pattern's tokens than
uniform attention would put there, 1 means all of it.

Running the model differently (a head's steps, knock-outs, importance, the logit lens) is
`core.interventions`: this module only reads what a forward pass shows.
Imports the model and the shared checks. Never imports the training loop, gradio, plotly or `playground`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from core.checks import check_attention, evaluating, ids_tensor
from core.model import GPT, capture_attention

STRONG_PATTERN = 0.5  # a chance-corrected score at least this high names the head
UNIFORM_ENTROPY = 0.85  # normalised entropy at least this high (and no pattern) means "uniform"
TIE = 0.05  # a confirmed induction head wins a fixed-offset score this close: on a periodic text they coincide
MIRROR_ROWS = 3  # a mirror needs at least this many query rows: fewer fit any head by chance
PROBE_HALF_MIN = 3  # the shortest half of an induction probe where induction can show
PROBE_HALF_MAX = 40  # tokens in each half of an induction probe, at most


@dataclass(frozen=True)
class Pattern:
    """A well-known way for a head to look, declared once: the analysis scores and names heads by it, the
    figures draw it (keyed by `name`)."""

    name: str
    # What a head it names does, for a learner: {share} of the attention on its keys, {offset}, {centre}.
    sentence: str
    # The keys it looks at from each query: (query (T, 1), key (1, T), tokens (T,)) -> (T, T) booleans.
    # None where it is searched for instead (fixed-offset over distances, mirror over centres).
    targets: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None
    threshold: float = STRONG_PATTERN  # the chance-corrected score from which it names a head


def _after_earlier_occurrence(query: torch.Tensor, key: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Keys that follow an earlier occurrence (at key - 1) of the query's token. Keys q - 1 and q are
    left out: there induction is indistinguishable from previous-token or self."""
    n = tokens.numel()
    follows_same_token = torch.zeros(n, n, dtype=torch.bool)
    follows_same_token[:, 1:] = tokens[:, None] == tokens[None, :-1]
    return follows_same_token & (key < query - 1)


PATTERNS = {pattern.name: pattern for pattern in (
    Pattern("previous-token", "Previous-token head: {share} of each token's attention goes to the token just "
            "before it, passing 'what came before' forward (a building block of induction heads).",
            lambda query, key, _tokens: key == query - 1),
    Pattern("first-token", "First-token head (attention sink): {share} of the attention rests on the first "
            "token, where heads park attention when nothing else is useful.",
            lambda query, key, _tokens: (key == 0) & (query > 0)),
    Pattern("self", "Self head: {share} of each token's attention stays on the token itself.",
            lambda query, key, _tokens: key == query),
    Pattern("fixed-offset", "Fixed-offset head: {share} of the attention goes to the token {offset} positions "
            "back, whatever it is: it reads by position, not by content.", None),
    Pattern("induction", "Induction head: when the current token appeared before, {share} of the attention "
            "goes to the token that followed it then, so the model can repeat what came next.",
            _after_earlier_occurrence),
    Pattern("mirror", "Mirror head: {share} of the attention goes as far before {centre} as the "
            "current token is after it, an anti-diagonal: the move that writes a word backwards.", None),
)}
LABELS = (*PATTERNS, "uniform", "mixed")  # every label a head can get


def attention_maps(model: GPT, ids: list[int]) -> torch.Tensor:
    """Attention weights of every layer and head on one text: (L, H, T, T).

    Runs in eval mode (no dropout) and restores the model's mode afterwards.
    """
    check_attention(model)
    idx = ids_tensor(model, ids)
    with evaluating(model), capture_attention(model) as patterns:
        model(idx)
    return torch.cat(list(patterns.values())).float().cpu()  # L x (1, H, T, T) -> (L, H, T, T)


def head_view(maps: torch.Tensor, query_index: int) -> torch.Tensor:
    """Where one query token looks in every head: (L, H, T) weights over the keys."""
    n_tokens = maps.size(-1)
    if not 0 <= query_index < n_tokens:
        raise ValueError(f"query token {query_index} is outside the text (positions 0 to {n_tokens - 1})")
    return maps[:, :, query_index, :]


# ---------------------------------------------------------------- per-head summaries


@dataclass(frozen=True)
class HeadSummary:
    layer: int
    head: int
    entropy: float  # bits, mean over query rows
    normalized_entropy: float  # entropy / the row's maximum (log2 of the visible tokens); 1 = uniform
    label: str  # one of LABELS: a pattern's name, "uniform" or "mixed"
    score: float  # how strongly the head shows its label, 0 to 1
    scores: dict[str, float | None]  # every pattern's score (PATTERNS order); None where the text cannot show it
    offset: int | None  # how many tokens back its best fixed-offset match looks (None: text too short)
    mirror_centre: float | None  # the position its best mirror reflects around (None: text too short)
    probe_induction: float | None  # its induction score on random tokens written twice (None: not tested)
    explanation: str  # a sentence or two for a learner

    @property
    def induction_head(self) -> bool:
        """Whether the head counts as an induction head, whatever this text shows (`is_induction_head`)."""
        return is_induction_head(self.layer, self.probe_induction)


def is_induction_head(layer: int, probe_score: float | None) -> bool:
    """The one rule for the "induction" label: the head follows repeats in fresh random text
    (`probe_induction`) and sits past layer 0, where it can compose with an earlier head."""
    return layer > 0 and probe_score is not None and probe_score >= STRONG_PATTERN


def induction_verdict_scores(probe: torch.Tensor) -> torch.Tensor:
    """The (L, H) scores `is_induction_head` reads, as one tensor: the probe's past layer 0, and 0 in layer 0,
    where no head can be one. A head is an induction head where its score is at least STRONG_PATTERN."""
    return probe * (torch.arange(probe.size(0)) > 0)[:, None]


def induction_heads(probe: torch.Tensor | None) -> list[tuple[int, int]]:
    """(layer, head) of every head that `is_induction_head` names, from each head's probe score (L, H)."""
    if probe is None:
        return []
    return [(layer, head) for layer in range(probe.size(0)) for head in range(probe.size(1))
            if is_induction_head(layer, float(probe[layer, head]))]


def entropy_bits(maps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean entropy of each head's query rows in bits, and the same normalised to 0..1: two (L, H).

    Row q can spread over q + 1 tokens, so its maximum is log2(q + 1); row 0 has no choice and
    is left out of the normalised mean (NaN for a single token).
    """
    per_row = torch.special.entr(maps).sum(-1) / math.log(2)  # (L, H, T)
    max_per_row = torch.log2(torch.arange(2, maps.size(-1) + 1, dtype=maps.dtype))  # (T - 1,) rows 1..T-1
    return per_row.mean(-1), (per_row[..., 1:] / max_per_row).mean(-1)


def pattern_targets(ids: list[int]) -> dict[str, torch.Tensor]:
    """For each pattern with `targets`, a (T, T) boolean mask of the keys it looks at from each query."""
    query = torch.arange(len(ids))[:, None]  # (T, 1)
    key = torch.arange(len(ids))[None, :]  # (1, T)
    tokens = torch.tensor(ids)
    return {name: pattern.targets(query, key, tokens) for name, pattern in PATTERNS.items()
            if pattern.targets is not None}


def pattern_scores(maps: torch.Tensor, ids: list[int]) -> dict[str, tuple[torch.Tensor, torch.Tensor] | None]:
    """Each pattern defined by `pattern_targets`: (mass, score), both (L, H), or None when no
    query row can show it (fixed-offset has its own search, `offset_scores`).

    mass: mean attention on the pattern's keys over the rows that have some (but not all keys).
    score: mass corrected for chance, (mass - uniform's mass) / (1 - uniform's mass), at least 0.
    """
    visible = torch.arange(1, len(ids) + 1, dtype=maps.dtype)  # (T,) keys each query can see
    results = {}
    for name, targets in pattern_targets(ids).items():
        n_targets = targets.sum(-1)  # (T,)
        rows = (n_targets > 0) & (n_targets < visible)
        if not rows.any():
            results[name] = None
            continue
        mass = (maps * targets).sum(-1)[..., rows].mean(-1)  # (L, H)
        chance = (n_targets[rows] / visible[rows]).mean()
        results[name] = (mass, ((mass - chance) / (1 - chance)).clamp(min=0))
    return results


def offset_scores(maps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Each head's best fixed look-back distance d >= 2: (mass, score, d), all (L, H); None if T < 4.

    Row q puts maps[q, q - d] on it; rows with q - d = 0 are left out (that is the first token).
    One diagonal at a time: no copy of the maps, which can be large.
    """
    n_tokens = maps.size(-1)
    positions = torch.arange(n_tokens, dtype=maps.dtype)
    candidates = {}
    for d in range(2, n_tokens - 1):
        mass = maps.diagonal(offset=-d, dim1=-2, dim2=-1)[..., 1:].mean(-1)  # rows q = d+1 .. T-1: (L, H)
        chance = (1 / (positions[d + 1:] + 1)).mean()  # what uniform attention would put there
        candidates[d] = (mass, chance)
    return _best_candidate(candidates)


def mirror_scores(maps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Each head's best mirror, keys k = s - q for a fixed sum s: (mass, score, s), all (L, H);
    None if the text is too short for MIRROR_ROWS rows.

    Only keys 1 .. q - 2 count: key 0 is the first token, keys q - 1 and q are previous-token
    and self, which every sum would otherwise borrow.
    """
    n_tokens = maps.size(-1)
    candidates = {}
    for total in range(2, 2 * n_tokens):
        first, end = (total + 3) // 2, min(total, n_tokens)  # rows q where 1 <= s - q <= q - 2
        if end - first < MIRROR_ROWS:
            continue
        queries = torch.arange(first, end)
        mass = maps[..., queries, total - queries].mean(-1)  # (L, H)
        chance = (1 / (queries + 1).to(maps.dtype)).mean()
        candidates[total] = (mass, chance)
    return _best_candidate(candidates)


def _best_candidate(candidates: dict[int, tuple[torch.Tensor, torch.Tensor]]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """{value: (mass (L, H), chance)} -> each head's best value by chance-corrected score:
    (mass, score, value), all (L, H); None without candidates."""
    if not candidates:
        return None
    values = torch.tensor(list(candidates))
    masses = torch.stack([mass for mass, _ in candidates.values()])  # (V, L, H)
    chances = torch.stack([torch.as_tensor(chance) for _, chance in candidates.values()])[:, None, None]
    scores = ((masses - chances) / (1 - chances)).clamp(min=0)
    best_score, best = scores.max(dim=0)  # over the candidates: (L, H)
    return masses.gather(0, best[None])[0], best_score, values[best]


def summarize_heads(maps: torch.Tensor, ids: list[int], probe: torch.Tensor | None = None) -> list[HeadSummary]:
    """One `HeadSummary` per head, layer by layer, for the text `ids` that made `maps`.

    probe: each head's induction score on random repeated text, (L, H) from `probe_induction`;
    without it no head is labelled induction, however well this text fits the pattern.
    """
    if maps.size(-1) != len(ids):
        raise ValueError(f"the maps cover {maps.size(-1)} tokens but {len(ids)} token ids were given")
    if len(ids) < 2:
        raise ValueError("a head can only choose where to look with at least 2 tokens")
    if probe is not None and probe.shape != maps.shape[:2]:
        raise ValueError(f"the probe scores are {tuple(probe.shape)} but the maps have {tuple(maps.shape[:2])} heads")
    entropy, normalized = entropy_bits(maps)
    patterns = pattern_scores(maps, ids)
    offsets = offset_scores(maps)
    patterns["fixed-offset"] = None if offsets is None else offsets[:2]
    mirrors = mirror_scores(maps)
    patterns["mirror"] = None if mirrors is None else mirrors[:2]
    patterns = {name: patterns[name] for name in PATTERNS}
    summaries = []
    for layer in range(maps.size(0)):
        for head in range(maps.size(1)):
            mass = {n: float(p[0][layer, head]) for n, p in patterns.items() if p is not None}
            scores = {n: None if p is None else float(p[1][layer, head]) for n, p in patterns.items()}
            offset = None if offsets is None else int(offsets[2][layer, head])
            centre = None if mirrors is None else int(mirrors[2][layer, head]) / 2
            probe_score = None if probe is None else float(probe[layer, head])
            label, score, closest = _label(scores, float(normalized[layer, head]),
                                           is_induction_head(layer, probe_score))
            explanation = (_explain(label, score, mass.get(label, 0.0), closest, offset, centre)
                           + _induction_note(label, layer, scores, probe_score))
            summaries.append(HeadSummary(
                layer=layer, head=head,
                entropy=float(entropy[layer, head]), normalized_entropy=float(normalized[layer, head]),
                label=label, score=score, scores=scores, offset=offset, mirror_centre=centre,
                probe_induction=probe_score, explanation=explanation,
            ))
    return summaries


def _label(scores: dict[str, float | None], normalized_entropy: float, induction_head: bool
           ) -> tuple[str, float, str]:
    """The head's label, its score, and the closest pattern; "induction" only for an induction head."""
    measured = {name: s for name, s in scores.items()
                if s is not None and (name != "induction" or induction_head)}
    closest = max(measured, key=measured.get)
    if closest == "fixed-offset" and measured.get("induction", -1.0) >= measured[closest] - TIE:
        # On a text that repeats with one period an induction head scores the same on both;
        # the probe showed this one reads content, not position.
        closest = "induction"
    # A head the probe calls an induction head keeps that name wherever induction is its best fit
    # on this text, however faint: the table agrees with the probe's verdict.
    if measured[closest] >= PATTERNS[closest].threshold or (closest == "induction" and measured[closest] > 0):
        return closest, measured[closest], closest
    if normalized_entropy >= UNIFORM_ENTROPY:
        return "uniform", normalized_entropy, closest
    return "mixed", measured[closest], closest


def _explain(label: str, score: float, mass: float, closest: str, offset: int | None,
             centre: float | None) -> str:
    if label in PATTERNS:
        centre_text = "the centre" if centre is None else f"position {centre:g}"
        return PATTERNS[label].sentence.format(share=f"{mass:.0%}", offset=offset, centre=centre_text)
    if label == "uniform":
        return (f"Averaging head: attention is spread almost evenly ({score:.0%} of the maximum "
                "entropy), a running average of everything before.")
    hint = f" (closest: {closest}, score {score:.2f})" if score >= 0.1 else ""
    return f"No single simple pattern{hint}; open it in the large view to see what it does."


def _induction_note(label: str, layer: int, scores: dict[str, float | None], probe_score: float | None) -> str:
    """Why the head is, or is not, an induction head, where this text alone would suggest otherwise."""
    on_text = scores["induction"] or 0.0
    probe_text = f"random tokens written twice (probe score {probe_score:.2f})" if probe_score is not None else ""
    if label == "induction":
        if (scores["fixed-offset"] or 0.0) >= STRONG_PATTERN:
            return (" A fixed offset fits this text too, but the head does the same on " + probe_text
                    + " at two repeat lengths: it reads content, not position.")
        return f" It does the same on {probe_text}."
    if is_induction_head(layer, probe_score):
        if scores["induction"] is None:
            return f" On {probe_text} it is an induction head; this text repeats no token for it to follow."
        if on_text < STRONG_PATTERN:
            return (f" On {probe_text} it is an induction head, though on this text it follows the repeats "
                    f"only weakly (induction score {on_text:.2f}).")
        return (f" On {probe_text} it is an induction head; on this text it follows the repeats too (induction "
                f"score {on_text:.2f}), but {label} fits it better.")
    if on_text < STRONG_PATTERN:
        return ""
    if layer == 0:
        why = ("a layer-0 head cannot be one: induction needs a previous-token head in an earlier layer "
               "to tell it which token came before.")
    elif probe_score is None:
        why = "the context is too short to test it on random repeated text."
    else:
        why = f"it does not follow the repeats in {probe_text}."
    return f" On this text it also lands where an induction head would look, but {why}"


def induction_probe(vocab_size: int, half_length: int, *, seed: int = 0) -> list[int]:
    """Random tokens written twice: the standard text on which induction heads light up.

    In the second half every token has appeared before, so an induction head looks at the
    token after that earlier occurrence, i.e. `half_length - 1` positions back.
    """
    if vocab_size < 1 or half_length < 1:
        raise ValueError("the probe needs a vocabulary and a half length of at least 1")
    generator = torch.Generator().manual_seed(seed)
    half = torch.randint(vocab_size, (half_length,), generator=generator).tolist()
    return half + half


def probe_halves(block_size: int) -> tuple[int, int] | None:
    """Two different half lengths for induction probes that fit a context: (short, long), or
    None when the context cannot hold two."""
    longest = min(block_size // 2, PROBE_HALF_MAX)
    shorter = max(PROBE_HALF_MIN, round(longest * 2 / 3))
    return None if shorter >= longest else (shorter, longest)


@torch.no_grad()
def probe_induction(model: GPT, *, seed: int = 0) -> torch.Tensor | None:
    """Each head's induction score on random tokens written twice, the lower of two repeat
    lengths: (L, H), or None when the model's context is too short for the probes or it has no
    attention (a stage without it).

    A head that reads by position looks back one fixed distance, which lands on the repeat of
    at most one of the lengths; an induction head follows the repeat at both. Seeded, so one
    model always gets the same scores.
    """
    halves = probe_halves(model.config.block_size)
    if halves is None or not model.config.use_attention or not model.blocks:
        return None
    scores = []
    for i, half in enumerate(halves):
        ids = induction_probe(model.config.vocab_size, half, seed=seed + i)
        _, score = pattern_scores(attention_maps(model, ids), ids)["induction"]
        scores.append(score)
    return torch.minimum(*scores)


# ---------------------------------------------------------------- downsampling for display


def token_spans(n_tokens: int, max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive groups [start, end) of equal size (the last may be shorter), at most `max_tokens`."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    size = math.ceil(n_tokens / max_tokens)
    return [(start, min(start + size, n_tokens)) for start in range(0, n_tokens, size)]


def pool_keys(weights: torch.Tensor, max_tokens: int) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Sum the weights (..., T) over groups of consecutive keys: (..., N), N <= max_tokens.

    Summing keeps each row a distribution: a group gets the attention of all its tokens.
    """
    n_tokens = weights.size(-1)
    spans = token_spans(n_tokens, max_tokens)
    size = spans[0][1] - spans[0][0]
    padded = F.pad(weights, (0, len(spans) * size - n_tokens))  # zeros add no weight
    return padded.unflatten(-1, (len(spans), size)).sum(-1), spans


def pool_attention(maps: torch.Tensor, max_tokens: int) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Block-pool maps (..., T, T) to at most (..., max_tokens, max_tokens) for display.

    A cell is the attention a group of queries gives (on average) to a group of keys, so rows
    still sum to 1. Returns the pooled maps and the token spans of the groups.
    """
    by_key, spans = pool_keys(maps, max_tokens)  # (..., T, N)
    by_both, _ = pool_keys(by_key.transpose(-1, -2), max_tokens)  # (..., N keys, N queries), summed
    group_sizes = torch.tensor([end - start for start, end in spans], dtype=maps.dtype)
    return by_both.transpose(-1, -2) / group_sizes[:, None], spans
