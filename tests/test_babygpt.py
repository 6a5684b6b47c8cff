"""The baby GPT as a Markov chain: states, the model's chain, training, data counts, analysis."""

import itertools
import math

import pytest
import torch
from torch.nn import functional as F

from core.babygpt import (
    EXAMPLE_SEQUENCE,
    BabyConfig,
    BabyRun,
    StateSpace,
    analyse_chain,
    disagreement,
    empirical_probs,
    entropy_bits,
    largest_disagreements,
    mean_step_probability,
    most_likely_cycle,
    new_model,
    next_token_probs,
    parse_sequence,
    sample_walk,
    stationary_distribution,
    training_windows,
    transition_counts,
    transition_graph,
    unseen_states,
)


@pytest.fixture(scope="module")
def trained() -> BabyRun:
    """Karpathy's example with the defaults (seed 1337)."""
    run = BabyRun.start(EXAMPLE_SEQUENCE, BabyConfig())
    for _ in run.train():
        pass
    return run


# ---------------------------------------------------------------- states


@pytest.mark.parametrize("V, L", [(2, 1), (2, 3), (2, 5), (3, 2), (3, 4), (4, 1), (4, 3)])
def test_states_and_edges_are_all_contexts(V, L):
    space = StateSpace(V, L)
    states = space.states()
    assert states.shape == (V**L, L)
    assert len({tuple(s) for s in states.tolist()}) == V**L  # all distinct
    assert [space.index(s) for s in states.tolist()] == list(range(V**L))  # numbered in order
    graph = transition_graph(space, torch.full((V**L, V), 1.0 / V))
    assert len(graph.labels) == V**L
    assert len(graph.edges) == V**L * V
    # each edge drops the oldest token and appends the edge's token
    for edge in graph.edges:
        assert graph.labels[edge.target] == graph.labels[edge.source][1:] + graph.token_labels[edge.token]


def test_state_labels_and_next_state():
    space = StateSpace(2, 3)
    assert space.labels() == ["000", "001", "010", "011", "100", "101", "110", "111"]
    assert space.parse_state("101") == 5
    assert space.next_state(5, 1) == space.parse_state("011")
    assert space.next_state(7, 0) == space.parse_state("110")
    with pytest.raises(ValueError, match="3 symbols"):
        space.parse_state("10")


@pytest.mark.parametrize(
    "V, L, match",
    [(1, 3, "vocab_size"), (5, 2, "vocab_size"), (2, 0, "context_length"), (2, 6, "context_length"),
     (4, 4, "256 states"), (3, 5, "243 states")],
)
def test_state_space_rejects_illegible_sizes(V, L, match):
    with pytest.raises(ValueError, match=match):
        StateSpace(V, L)


def test_transition_matrix_rows_are_the_edges():
    space = StateSpace(3, 2)
    probs = torch.softmax(torch.randn(9, 3), dim=1)
    matrix = space.transition_matrix(probs)
    assert torch.allclose(matrix.sum(dim=1), torch.ones(9, dtype=torch.float64))
    for edge in transition_graph(space, probs).edges:
        assert matrix[edge.source, edge.target].item() == pytest.approx(edge.probability)
    with pytest.raises(ValueError, match="shape"):
        space.transition_matrix(probs[:, :2])


# ---------------------------------------------------------------- the model's chain


@pytest.mark.parametrize("V, L, temperature", [(2, 3, 1.0), (3, 2, 0.5), (4, 3, 2.0)])
def test_graph_matches_the_models_own_forward_pass(V, L, temperature):
    config = BabyConfig(vocab_size=V, context_length=L, n_layer=2, n_head=2, n_embd=8, seed=3)
    model = new_model(config)
    space = StateSpace(V, L)
    probs = next_token_probs(model, space, temperature)
    assert torch.allclose(probs.sum(dim=1), torch.ones(V**L, dtype=torch.float64))
    graph = transition_graph(space, probs)
    for state, label in enumerate(graph.labels):
        ids = torch.tensor([space.tokenizer.encode(label)])
        with torch.no_grad():
            logits, _ = model(ids)  # one state at a time, unbatched
        expected = F.softmax(logits[0, -1].double() / temperature, dim=-1)
        edges = [e for e in graph.edges if e.source == state]
        assert [e.token for e in edges] == list(range(V))
        assert [e.probability for e in edges] == pytest.approx(expected.tolist(), abs=1e-6)


def test_temperature_sharpens_and_flattens():
    model = new_model(BabyConfig(seed=5))
    space = StateSpace(2, 3)
    base = entropy_bits(next_token_probs(model, space, 1.0))
    assert (entropy_bits(next_token_probs(model, space, 0.2)) < base).all()
    assert (entropy_bits(next_token_probs(model, space, 5.0)) > base).all()
    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="temperature"):
            next_token_probs(model, space, bad)


def test_new_model_depends_only_on_the_seed_not_on_the_global_rng():
    torch.manual_seed(123)
    a = new_model(BabyConfig(seed=7))
    torch.manual_seed(999)  # another session drawing from the global RNG meanwhile changes nothing
    b, c = new_model(BabyConfig(seed=7)), new_model(BabyConfig(seed=8))
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    assert not torch.equal(a.token_embedding.weight, c.token_embedding.weight)


# ---------------------------------------------------------------- data


def test_parse_sequence_checks_alphabet_and_length():
    assert parse_sequence("1101 0\n1", 2, 3) == [1, 1, 0, 1, 0, 1]
    assert parse_sequence("0123", 4, 3) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"only use 0, 1; found '2' at position 3"):
        parse_sequence("102", 2, 1)
    with pytest.raises(ValueError, match="needs at least 4"):
        parse_sequence("101", 2, 3)
    with pytest.raises(ValueError, match="needs at least 2"):
        parse_sequence("   ", 2, 1)
    with pytest.raises(ValueError, match="limit"):
        parse_sequence("01" * 6000, 2, 3)


def test_windows_and_counts_of_the_example():
    ids = parse_sequence(EXAMPLE_SEQUENCE, 2, 3)
    windows, targets = training_windows(ids, 3)
    assert windows.shape == (12, 3) and targets.shape == (12,)
    assert windows[0].tolist() == [1, 1, 1] and targets[0].item() == 1
    assert windows[-1].tolist() == [1, 1, 1] and targets[-1].item() == 0
    space = StateSpace(2, 3)
    counts = transition_counts(space, ids)
    assert counts.sum().item() == 12
    # 111 is followed by 1 three times and by 0 three times; 101 always by 1
    assert counts[space.parse_state("111")].tolist() == [3, 3]
    assert counts[space.parse_state("101")].tolist() == [0, 2]
    assert [space.labels()[s] for s in unseen_states(counts)] == ["000", "001", "010", "100"]
    freqs = empirical_probs(counts)
    assert freqs[7].tolist() == [0.5, 0.5]
    assert torch.isnan(freqs[0]).all()


def test_disagreement_is_total_variation_and_nan_when_unseen():
    counts = torch.tensor([[3, 1], [0, 0]])
    probs = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    result = disagreement(probs, counts)
    assert result[0].item() == pytest.approx(0.5)
    assert math.isnan(result[1].item())


def test_largest_disagreements_skip_unseen_states():
    counts = torch.tensor([[3, 1], [0, 0], [1, 1], [0, 5]])
    probs = torch.tensor([[0.75, 0.25], [0.0, 1.0], [0.9, 0.1], [0.5, 0.5]])
    assert largest_disagreements(probs, counts, k=2) == [3, 2]  # distances 0.5, 0.4 (0: 0.0)
    assert largest_disagreements(probs, counts, k=10) == [3, 2, 0]


# ---------------------------------------------------------------- training


def test_training_yields_every_step_and_learns(trained):
    snapshots = trained.snapshots
    assert [s.step for s in snapshots] == list(range(51))
    assert snapshots[-1].loss < snapshots[0].loss
    assert snapshots[0].loss == pytest.approx(math.log(2), abs=0.05)  # untrained: a coin flip
    # the last snapshot is the trained model itself
    assert torch.allclose(snapshots[-1].probs(), next_token_probs(trained.model, trained.space), atol=1e-6)
    for snapshot in snapshots:
        assert torch.allclose(snapshot.probs().sum(dim=1), torch.ones(8, dtype=torch.float64))


def test_training_reproduces_karpathys_example(trained):
    space, probs = trained.space, trained.snapshots[-1].probs()
    p = {label: probs[space.parse_state(label)] for label in ("101", "111", "000")}
    # Karpathy's run: 101 -> 011 about 79%, 111 -> 111/110 about 45/55, unseen 000 -> 001 about 73%
    assert p["101"][1].item() == pytest.approx(0.79, abs=0.03)
    assert p["111"][1].item() == pytest.approx(0.45, abs=0.08)
    assert p["000"][1].item() == pytest.approx(0.72, abs=0.05)


@pytest.mark.parametrize("seed", [0, 1, 2, 7])  # over seeds 0..19 and 1337 the lowest was 0.72 (seed 7)
def test_101_goes_to_011_whatever_the_seed(seed):
    run = BabyRun.start(EXAMPLE_SEQUENCE, BabyConfig(seed=seed))
    for snapshot in run.train():
        pass
    probs = snapshot.probs()[run.space.parse_state("101")]
    assert probs[1].item() > 0.65


def test_training_is_deterministic_and_zero_steps_is_the_untrained_model():
    a, b = (BabyRun.start("0110100110", BabyConfig(vocab_size=2, context_length=2, steps=5)) for _ in range(2))
    assert [s.loss for s in a.train()] == [s.loss for s in b.train()]
    untrained = BabyRun.start("0110", BabyConfig(context_length=2, steps=0))
    assert [s.step for s in untrained.train()] == [0]
    assert untrained.snapshot(10).step == 0
    with pytest.raises(ValueError, match="already trained"):
        next(untrained.train())


@pytest.mark.parametrize(
    "fields, match",
    [(dict(steps=-1), "steps"), (dict(learning_rate=math.nan), "learning_rate"),
     (dict(n_embd=10, n_head=4), "divisible"), (dict(vocab_size=4, context_length=4), "256 states")],
)
def test_config_rejects_bad_values(fields, match):
    with pytest.raises(ValueError, match=match):
        BabyConfig(**fields)


# ---------------------------------------------------------------- chain analysis


def test_stationary_distribution_of_known_chains():
    two_state = torch.tensor([[0.9, 0.1], [0.5, 0.5]])
    assert stationary_distribution(two_state).tolist() == pytest.approx([5 / 6, 1 / 6])
    # a periodic chain (0 -> 1 -> 2 -> 0) still has the uniform stationary distribution
    cycle = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert stationary_distribution(cycle).tolist() == pytest.approx([1 / 3] * 3)
    # an absorbing state takes everything
    absorbing = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    assert stationary_distribution(absorbing).tolist() == pytest.approx([0.0, 1.0], abs=1e-9)
    with pytest.raises(ValueError, match="summing to 1"):
        stationary_distribution(torch.tensor([[0.5, 0.4], [0.0, 1.0]]))


def test_stationary_distribution_is_fixed_by_the_models_chain(trained):
    matrix = trained.space.transition_matrix(trained.snapshots[-1].probs())
    pi = stationary_distribution(matrix)
    assert pi.sum().item() == pytest.approx(1.0)
    assert torch.allclose(pi @ matrix, pi, atol=1e-9)


def test_most_likely_cycle_of_known_chains():
    # 0 -> 1 -> 2 -> 0 with 0.9 each beats the self-loop at 0 (0.1) and at 2 (0.1)
    matrix = torch.tensor([[0.1, 0.9, 0.0], [0.0, 0.0, 1.0], [0.9, 0.0, 0.1]])
    assert most_likely_cycle(matrix) == [0, 1, 2]
    assert mean_step_probability(matrix, [0, 1, 2]) == pytest.approx((0.9 * 1.0 * 0.9) ** (1 / 3))
    # a sure self-loop wins over anything less sure
    assert most_likely_cycle(torch.tensor([[0.5, 0.5], [0.0, 1.0]])) == [1]


def _simple_cycles(n: int):
    for size in range(1, n + 1):
        for nodes in itertools.permutations(range(n), size):
            if nodes[0] == min(nodes):
                yield list(nodes)


@pytest.mark.parametrize("seed", range(5))
def test_most_likely_cycle_matches_brute_force(seed):
    generator = torch.Generator().manual_seed(seed)
    n = 5
    weights = torch.rand(n, n, generator=generator) * (torch.rand(n, n, generator=generator) < 0.6)
    weights[torch.arange(n), (torch.arange(n) + 1) % n] += 0.01  # every row has an edge
    matrix = (weights / weights.sum(dim=1, keepdim=True)).double()

    def mean_log(cycle):
        return sum(math.log(matrix[u, v]) for u, v in zip(cycle, cycle[1:] + cycle[:1])) / len(cycle)

    feasible = [c for c in _simple_cycles(n) if all(matrix[u, v] > 0 for u, v in zip(c, c[1:] + c[:1]))]
    found = most_likely_cycle(matrix)
    assert found in feasible
    assert mean_log(found) == pytest.approx(max(map(mean_log, feasible)))


def test_most_likely_cycle_of_the_example_is_its_repeating_pattern(trained):
    cycle = most_likely_cycle(trained.space.transition_matrix(trained.snapshots[-1].probs()))
    assert [trained.space.labels()[s] for s in cycle] == ["011", "111", "110", "101"]


def test_analyse_chain_of_the_example(trained):
    probs = trained.snapshots[-1].probs()
    analysis = analyse_chain(trained.space, probs, trained.counts)
    assert analysis.unseen == [0, 1, 2, 4]
    assert analysis.cycle == [3, 7, 6, 5]
    assert 0.5 < analysis.cycle_probability < 1.0
    assert analysis.stationary.sum().item() == pytest.approx(1.0)
    # the model has not fully learnt the deterministic 011 -> 111, 101 -> 011, 110 -> 101
    assert set(analysis.most_disagreeing) <= {3, 5, 6, 7} and len(analysis.most_disagreeing) == 3
    assert analysis.entropy.shape == (8,)


def test_entropy_in_bits():
    probs = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75]])
    expected = [1.0, 0.0, -(0.25 * math.log2(0.25) + 0.75 * math.log2(0.75))]
    assert entropy_bits(probs).tolist() == pytest.approx(expected)


def test_sampled_walk_follows_edges_and_is_seeded():
    space = StateSpace(2, 2)
    probs = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.3, 0.7], [1.0, 0.0]])
    walk = sample_walk(space, probs, 0, 30, torch.Generator().manual_seed(1))
    assert len(walk) == 31 and walk[0] == 0
    matrix = space.transition_matrix(probs)
    assert all(matrix[u, v] > 0 for u, v in zip(walk, walk[1:]))
    assert walk == sample_walk(space, probs, 0, 30, torch.Generator().manual_seed(1))
    # the frequencies of a long walk approach the edge probabilities
    long = sample_walk(space, probs, 2, 4000, torch.Generator().manual_seed(2))
    from_2 = [v for u, v in zip(long, long[1:]) if u == 2]
    assert from_2.count(space.next_state(2, 1)) / len(from_2) == pytest.approx(0.7, abs=0.06)
    with pytest.raises(ValueError, match="start state"):
        sample_walk(space, probs, 4, 3)
