"""Presets: every one builds valid configs for its corpus; overrides go where they belong."""

import pytest

from core.config import GPTConfig
from core.data import CORPORA
from core.presets import PRESETS, get_preset, preset_configs, preset_corpus
from core.train import TrainConfig


def test_the_required_presets_exist():
    assert {"shakespeare-char-cpu", "shakespeare-char", "baby-gpt", "repeat", "reverse", "sort"} <= set(PRESETS)
    # one preset per synthetic corpus
    assert {p.corpus for p in PRESETS.values()} == set(CORPORA)


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds(name):
    preset = PRESETS[name]
    assert preset.name == name and preset.title and preset.description
    assert preset.corpus in CORPORA and preset.tokenizer in ("char", "gpt2")
    model, train = preset_configs(name, vocab_size=50)
    assert isinstance(model, GPTConfig) and isinstance(train, TrainConfig)
    assert model.vocab_size == 50


@pytest.mark.parametrize("name", ["baby-gpt", "repeat", "reverse", "sort"])
def test_synthetic_corpora_fit_their_presets(name):
    text, tokenizer = preset_corpus(name)
    model, _ = preset_configs(name, tokenizer.vocab_size)
    assert tokenizer.vocab_size == len(set(text))
    assert len(text) > 10 * model.block_size


def test_shakespeare_cpu_is_nanogpts_recipe():
    model, train = preset_configs("shakespeare-char-cpu", vocab_size=65)
    assert (model.n_layer, model.n_head, model.n_embd, model.block_size, model.dropout) == (4, 4, 128, 64, 0.0)
    assert not (model.bias or model.qkv_bias or model.lm_head_bias) and not model.tie_weights  # measured better
    assert (train.batch_size, train.max_iters, train.learning_rate, train.min_lr) == (12, 2000, 1e-3, 1e-4)
    assert (train.warmup_iters, train.lr_decay_iters, train.beta1, train.beta2) == (100, 2000, 0.9, 0.99)
    assert (train.weight_decay, train.grad_clip, train.eval_interval, train.eval_iters) == (0.1, 1.0, 250, 20)
    gpu_model, gpu_train = preset_configs("shakespeare-char", vocab_size=65)
    assert (gpu_model.n_layer, gpu_model.n_embd, gpu_model.block_size, gpu_model.dropout) == (6, 384, 256, 0.2)
    assert (gpu_train.batch_size, gpu_train.max_iters, gpu_train.learning_rate) == (64, 5000, 1e-3)
    assert gpu_model.tie_weights and not gpu_model.bias


def test_baby_gpt():
    model, train = preset_configs("baby-gpt", vocab_size=2)
    assert (model.n_layer, model.n_head, model.n_embd, model.block_size) == (4, 4, 16, 3)
    assert not (model.bias or model.qkv_bias or model.lm_head_bias)
    assert (train.learning_rate, train.weight_decay, train.max_iters) == (1e-3, 0.1, 50)
    assert get_preset("baby-gpt").corpus == "binary"


def test_overrides_go_to_the_right_config():
    model, train = preset_configs("repeat", vocab_size=28, n_layer=3, dropout=0.1, batch_size=5, seed=9)
    assert (model.n_layer, model.dropout, train.batch_size, train.seed) == (3, 0.1, 5, 9)


def test_a_shorter_run_ends_its_decay_too():
    _, train = preset_configs("shakespeare-char-cpu", vocab_size=65, max_iters=300)
    assert train.lr_decay_iters == 300
    _, train = preset_configs("shakespeare-char-cpu", vocab_size=65, max_iters=300, lr_decay_iters=1000)
    assert train.lr_decay_iters == 1000


def test_bad_names_and_values():
    with pytest.raises(ValueError, match="unknown preset"):
        preset_configs("gpt-5", vocab_size=65)
    with pytest.raises(ValueError, match="unknown settings.*colour"):
        preset_configs("repeat", vocab_size=28, colour="red")
    with pytest.raises(ValueError, match="vocab_size"):
        preset_configs("repeat", vocab_size=0)
    with pytest.raises(ValueError, match="n_embd"):
        preset_configs("repeat", vocab_size=28, n_head=5)
