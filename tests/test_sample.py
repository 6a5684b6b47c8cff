"""Generation: KV-cache equivalence across window overflows, sampling filters, streaming."""

import math

import pytest
import torch
from torch.nn import functional as F

from core.babygpt import softmax_with_temperature
from core.config import GPTConfig, stage_config
from core.model import GPT
from core.sample import generate, sampling_probs, stream, window_start
from core.tokenizers import CharTokenizer

TOKENIZER = CharTokenizer("abcdefghijklmnop")


@pytest.fixture
def model() -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=32)
    return GPT(config).eval()


def test_window_keeps_the_newest_half_when_full():
    assert window_start(8, 0, 8) == 0  # fits
    assert window_start(9, 0, 8) == 5  # overflow: keep the newest 4
    assert window_start(12, 5, 8) == 5  # fits again
    assert window_start(14, 5, 8) == 10
    assert window_start(4, 0, 3) == 2  # odd sizes keep ceil(3 / 2) = 2


@pytest.mark.parametrize("prompt_length", [1, 5, 20])
def test_greedy_with_cache_equals_without_across_overflows(model, prompt_length):
    idx = torch.randint(16, (2, prompt_length))
    cached = generate(model, idx, 30, temperature=0, use_cache=True)
    uncached = generate(model, idx, 30, temperature=0, use_cache=False)
    assert cached.shape == (2, prompt_length + 30)
    assert torch.equal(cached[:, :prompt_length], idx)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("stage", ["bigram", "positions", "feed_forward", "one_head"])
def test_every_stage_decodes_the_same_with_and_without_cache(stage):
    torch.manual_seed(0)
    model = GPT(stage_config(stage, vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=32)).eval()
    idx = torch.randint(16, (1, 3))
    assert torch.equal(generate(model, idx, 20, temperature=0), generate(model, idx, 20, temperature=0, use_cache=False))


def test_a_model_without_the_causal_mask_decodes_without_a_cache():
    """Its earlier tokens' keys change as later tokens arrive, so no cache stays valid: generate
    re-runs the window every token, the same whether a cache was asked for or not."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=32, causal=False)).eval()
    idx = torch.randint(16, (1, 3))
    cached = generate(model, idx, 12, temperature=0)
    assert torch.equal(cached, generate(model, idx, 12, temperature=0, use_cache=False))
    window = cached[:, :6]  # each token is the argmax of a full, unmasked pass over the window before it
    assert cached[0, 6] == model(window)[0][0, -1].argmax()


def test_cache_refills_once_per_half_window(model):
    lengths = []
    handle = model.token_embedding.register_forward_hook(lambda m, args, out: lengths.append(args[0].size(1)))
    generate(model, torch.zeros(1, 5, dtype=torch.long), 12, temperature=0)
    handle.remove()
    # prefill 5; 3 single steps fill the window (8); each overflow refills the newest 4, which
    # then grow one position at a time back to 8
    assert lengths == [5, 1, 1, 1, 4, 1, 1, 1, 1, 4, 1, 1]


def test_sampled_tokens_match_with_and_without_cache(model):
    idx = torch.zeros(1, 3, dtype=torch.long)
    a = generate(model, idx, 25, temperature=1.0, seed=3, use_cache=True)
    b = generate(model, idx, 25, temperature=1.0, seed=3, use_cache=False)
    assert torch.equal(a, b)


def test_seed_and_generator_make_runs_reproducible(model):
    idx = torch.zeros(1, 1, dtype=torch.long)
    a = generate(model, idx, 20, seed=1)
    assert torch.equal(a, generate(model, idx, 20, seed=1))
    assert torch.equal(a, generate(model, idx, 20, generator=torch.Generator().manual_seed(1)))
    assert not torch.equal(a, generate(model, idx, 20, seed=2))


def test_temperature_zero_is_argmax(model):
    idx = torch.tensor([[3, 1, 4]])
    out = generate(model, idx, 1, temperature=0)
    logits, _ = model(idx)
    assert out[0, -1].item() == logits[0, -1].argmax().item()


@pytest.mark.parametrize("temperature", [1e-30, 1e-300, 5e-324])
def test_tiny_temperatures_are_greedy_not_nan(model, temperature):
    idx = torch.tensor([[3, 1, 4]])
    greedy = generate(model, idx, 15, temperature=0)
    assert torch.equal(generate(model, idx, 15, temperature=temperature, seed=0), greedy)
    logits = model(idx)[0][:, -1]
    for top_k, top_p in [(None, None), (3, None), (None, 0.9)]:
        probs = sampling_probs(logits, temperature, top_k, top_p)
        assert torch.equal(probs, F.one_hot(logits.argmax(-1), 16).float())
    steps = list(stream(model, TOKENIZER, [3, 1, 4], 15, temperature=temperature, seed=0))
    assert [s.token_id for s in steps] == greedy[0, 3:].tolist()
    assert all(s.prob == 1.0 and all(math.isfinite(p) for _, _, p in s.alternatives) for s in steps)
    # the baby GPT's chains share the same tempering (in float64)
    baby = softmax_with_temperature(logits, temperature)
    assert torch.equal(baby, F.one_hot(logits.argmax(-1), 16).double())


def test_tempering_keeps_the_distribution_at_ordinary_temperatures():
    logits = torch.tensor([[2.0, -1.0, 0.5, 30.0]])
    for temperature in (0.3, 1.0, 7.0):
        assert torch.allclose(sampling_probs(logits, temperature, None, None), torch.softmax(logits / temperature, -1))
    huge = sampling_probs(logits, 1e300, None, None)  # as hot as it gets: uniform
    assert torch.allclose(huge, torch.full((1, 4), 0.25))


def test_top_k_and_top_p_of_one_token_are_greedy(model):
    idx = torch.tensor([[3, 1, 4]])
    greedy = generate(model, idx, 15, temperature=0)
    assert torch.equal(generate(model, idx, 15, top_k=1, seed=0), greedy)
    assert torch.equal(generate(model, idx, 15, top_p=1e-6, seed=0), greedy)


def test_sampling_filters():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.allclose(sampling_probs(logits, 1.0, None, None), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = sampling_probs(logits, 1.0, 2, None)
    assert torch.allclose(top2, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # top-p keeps the smallest set reaching p: 0.5 + 0.3 >= 0.7
    assert torch.allclose(sampling_probs(logits, 1.0, None, 0.7), top2)
    assert torch.allclose(sampling_probs(logits, 1.0, None, 0.5), torch.tensor([[1.0, 0, 0, 0]]))
    # order does not matter
    shuffled = logits[:, [2, 0, 3, 1]]
    assert torch.allclose(sampling_probs(shuffled, 1.0, None, 0.7), top2[:, [2, 0, 3, 1]])
    cold, hot = sampling_probs(logits, 0.5, None, None), sampling_probs(logits, 2.0, None, None)
    assert cold[0, 0] > 0.5 > hot[0, 0]
    assert top2.sum() == pytest.approx(1.0)


def test_stream_matches_generate_and_reports_probabilities(model):
    prompt = TOKENIZER.encode("abc")
    steps = list(stream(model, TOKENIZER, prompt, 20, seed=5, n_alternatives=3))
    ids = generate(model, torch.tensor([prompt]), 20, seed=5)[0, 3:].tolist()
    assert [s.token_id for s in steps] == ids
    assert "".join(s.text for s in steps) == TOKENIZER.decode(ids)
    for step in steps:
        probs = [p for _, _, p in step.alternatives]
        assert probs[:3] == sorted(probs[:3], reverse=True)
        assert step.token_id in [i for i, _, _ in step.alternatives]
        assert 0 < step.prob <= 1 and len(step.alternatives) in (3, 4)
        chosen = next(p for i, _, p in step.alternatives if i == step.token_id)
        assert chosen == pytest.approx(step.prob)


def test_stop_tokens_end_the_text_at_the_first_one_written(model):
    prompt = TOKENIZER.encode("abc")
    free = list(stream(model, TOKENIZER, prompt, 40, seed=3))
    ids = [s.token_id for s in free]
    stop = ids[5]  # a token the model writes, first at or before step 6
    first = ids.index(stop)
    stopped = list(stream(model, TOKENIZER, prompt, 40, seed=3, stop_tokens=[stop]))
    assert [s.token_id for s in stopped] == ids[:first + 1]  # the same draws, up to the stop token included
    # generate: the rows go on together until each has written one; each row is as it would be alone
    rows = torch.tensor([prompt, TOKENIZER.encode("pon")])
    alone = generate(model, rows, 40, temperature=0)[:, 3:].tolist()
    stops = {alone[0][2], alone[1][4]}
    firsts = [next(i for i, token in enumerate(row) if token in stops) for row in alone]
    together = generate(model, rows, 40, temperature=0, stop_tokens=stops)
    assert together.size(1) == 3 + max(firsts) + 1
    assert together[:, 3:].tolist() == [row[:max(firsts) + 1] for row in alone]


def test_stream_probability_is_the_models(model):
    prompt = TOKENIZER.encode("ab")
    step = next(stream(model, TOKENIZER, prompt, 1, temperature=0))
    probs = torch.softmax(model(torch.tensor([prompt]))[0][0, -1], dim=-1)
    assert step.prob == pytest.approx(probs.max().item(), rel=1e-5)
    assert step.alternatives[0][1] == TOKENIZER.token_label(step.token_id)


def test_generation_restores_the_models_mode(model):
    model.train()
    generate(model, torch.zeros(1, 1, dtype=torch.long), 2)
    list(stream(model, TOKENIZER, [0], 2))
    assert model.training


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-1.0), "temperature"), (dict(temperature=float("inf")), "temperature"),
    (dict(top_k=0), "top_k"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(max_new_tokens=-1), "max_new_tokens"), (dict(seed="x"), "seed"),
    (dict(stop_tokens=[16]), "stop tokens"), (dict(stop_tokens=[True]), "stop tokens"),
    (dict(stop_tokens="a"), "stop_tokens"), (dict(stop_tokens=3), "stop_tokens"),
])
def test_bad_arguments_are_refused(model, kwargs, message):
    args = dict(max_new_tokens=3) | kwargs
    with pytest.raises(ValueError, match=message):
        generate(model, torch.zeros(1, 1, dtype=torch.long), **args)
    with pytest.raises(ValueError, match=message):
        list(stream(model, TOKENIZER, [0], **args))


def test_bad_prompts_are_refused(model):
    with pytest.raises(ValueError, match="empty"):
        list(stream(model, TOKENIZER, [], 3))
    with pytest.raises(ValueError, match="token ids"):
        list(stream(model, TOKENIZER, [99], 3))
    with pytest.raises(ValueError, match="idx"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 3)
