"""Named recipes: a corpus, a tokenizer, a model shape and a training schedule.

    model_config, train_config = preset_configs("shakespeare-char-cpu", vocab_size=65, max_iters=500)

Overrides go to whichever config has a field of that name. Shortening `max_iters` alone also
moves `lr_decay_iters` with it, so a shorter run still ends its cosine decay at `min_lr`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.config import GPTConfig
from core.data import corpus_text, default_tokenizer
from core.tokenizers import Tokenizer
from core.train import TrainConfig

# nanoGPT's model choices: no biases, LM head tied to the token embedding.
NANOGPT_MODEL = dict(bias=False, qkv_bias=False, lm_head_bias=False, tie_weights=True)
# nanoGPT's Shakespeare schedule and optimizer: both of its recipes share these.
NANOGPT_TRAIN = dict(learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, weight_decay=0.1, beta1=0.9, beta2=0.99,
                     grad_clip=1.0)
# The synthetic tasks: two layers are the fewest that can form an induction head; with more,
# the solution spreads over several heads and the pattern is less crisp (measured, see
# tests/bench/bench_tasks.py). A context of two whole 18-character lines: then every answer in a
# validation window has its question in the same window, and a perfect model scores 100%
# (a context of 32 capped the score at 75%).
TASK_MODEL = dict(n_layer=2, n_head=4, n_embd=128, block_size=36, dropout=0.0)
TASK_TRAIN = dict(
    max_iters=400, batch_size=64, learning_rate=2e-3, min_lr=2e-4, warmup_iters=50, lr_decay_iters=400,
    weight_decay=0.01, eval_interval=50, eval_iters=10,
)


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    description: str
    corpus: str  # a key of core.data.CORPORA
    tokenizer: str  # 'char' or 'gpt2'
    model: dict  # GPTConfig fields (vocab_size comes from the tokenizer)
    train: dict  # TrainConfig fields


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "shakespeare-char-cpu", "Shakespeare, CPU recipe",
            "nanoGPT's CPU recipe: 4 layers, 4 heads, 128 channels, 64 characters of context, "
            "2000 steps, with the output layer untied from the token embedding. About a minute from the "
            "command line on a 2-core CPU (longer in a shared app); validation loss about 1.88.",
            "shakespeare", "char",
            # Untied: at this size the shared matrix is a bottleneck. Over 8 paired seeds the untied
            # model ends 0.027 lower in validation loss (1.877 vs 1.905, every seed better) for 8,320
            # more parameters; on the GPU recipe tying costs nothing (tests/bench/README.md).
            model=dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0,
                       **{**NANOGPT_MODEL, "tie_weights": False}),
            train=dict(max_iters=2000, lr_decay_iters=2000, batch_size=12, eval_interval=250, eval_iters=20,
                       **NANOGPT_TRAIN),
        ),
        Preset(
            "shakespeare-char", "Shakespeare, GPU recipe",
            "nanoGPT's GPU recipe: 6 layers, 6 heads, 384 channels, 256 characters of context, "
            "5000 steps of 64 sequences. Minutes on a GPU, hours on a CPU; validation loss about 1.47.",
            "shakespeare", "char",
            model=dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.2, **NANOGPT_MODEL),
            train=dict(max_iters=5000, lr_decay_iters=5000, batch_size=64, eval_interval=250, eval_iters=200,
                       **NANOGPT_TRAIN),
        ),
        Preset(
            "baby-gpt", "Baby GPT",
            "Karpathy's baby GPT: two tokens, a context of 3, 4 layers of 4 heads in 16 channels, "
            "trained for 50 steps on 111101111011110 repeated. Small enough to read as a Markov chain "
            "of 8 states.",
            "binary", "char",
            model=dict(
                n_layer=4, n_head=4, n_embd=16, block_size=3, dropout=0.0,
                bias=False, qkv_bias=False, lm_head_bias=False,
            ),
            train=dict(
                max_iters=50, batch_size=12, learning_rate=1e-3, min_lr=1e-3, warmup_iters=0,
                lr_decay_iters=50, weight_decay=0.1, grad_clip=0.0, eval_interval=10, eval_iters=4,
            ),
        ),
        Preset(
            "repeat", "Copy task: a head that copies",
            "Random 8-letter words written twice (abcdefgh|abcdefgh). The loss counts the copied half "
            "only: the first half is random, so no model could predict it. One layer is enough: to "
            "copy, a head looks 8 places back, at the letter after the earlier copy of the current "
            "one. When that head forms, around step 150, the loss drops suddenly and the answers go "
            "from guessed to right (the green line, on whole lines, falls to 0; the others level off "
            "near 0.8, as a window that starts mid-line holds copies of letters it cannot see). Every "
            "word has 8 letters, so this is a fixed offset, not a true induction head, which needs two "
            "layers: the Attention tab's induction probe tells them apart. Never taught the random "
            "first halves, the model's own sample repeats one made-up word: give it a word and `|` on "
            "the Generate tab to watch it copy.",
            # The workshop default: sixty learners train it at once on two cores, so it is small
            # (~2 s of one core). Counting the answers alone, one layer copies perfectly by step
            # 150-200 on every seed tried; two layers on all targets, not within 500 (tests/bench/README.md).
            "repeat", "char", model=dict(TASK_MODEL, n_layer=1, n_embd=64),
            train=dict(TASK_TRAIN, max_iters=250, lr_decay_iters=250, batch_size=32, learning_rate=3e-3,
                       min_lr=3e-4, warmup_iters=30, eval_iters=5, answers_only=True),
        ),
        Preset(
            "reverse", "Reverse task: anti-diagonal",
            "Random 8-letter words then their reversal (abcdefgh>hgfedcba). Writing the reversal "
            "makes an anti-diagonal attention pattern.",
            "reverse", "char", model=dict(TASK_MODEL),
            # Harder than copying: a key must know its offset from the line start, the query its
            # offset from '>'. A gentler learning rate than the other tasks' lets one head take the
            # whole mirror lookup (about 0.9 of its attention on the mirror position, 3 seeds);
            # at 2e-3 or 3e-3 the lookup splits over heads, one range of positions each.
            train=dict(TASK_TRAIN, max_iters=600, lr_decay_iters=600, learning_rate=1e-3, min_lr=1e-4,
                       eval_interval=100),
        ),
        Preset(
            "sort", "Sort task: search for the next digit",
            "Eight random digits then the same digits sorted (38152706=01235678). Heads search the "
            "unsorted half for the digit to write next: a soft search, spread over the digits near it "
            "in value, unlike the crisp copy and reverse patterns.",
            "sort", "char", model=dict(TASK_MODEL), train=dict(TASK_TRAIN),
        ),
    )
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {list(PRESETS)}")
    return PRESETS[name]


def preset_configs(name: str, vocab_size: int, **overrides) -> tuple[GPTConfig, TrainConfig]:
    """The preset's model and training configs for a tokenizer of `vocab_size`, with overrides."""
    preset = get_preset(name)
    model_fields = {f.name for f in dataclasses.fields(GPTConfig)} - {"vocab_size"}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - model_fields - train_fields
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; model settings are {sorted(model_fields)}, "
                         f"training settings are {sorted(train_fields)}")
    model = {**preset.model, **{k: v for k, v in overrides.items() if k in model_fields}}
    train = {**preset.train, **{k: v for k, v in overrides.items() if k in train_fields}}
    if "max_iters" in overrides and "lr_decay_iters" not in overrides:
        train["lr_decay_iters"] = train["max_iters"]
    return GPTConfig(vocab_size=vocab_size, **model), TrainConfig(**train)


def preset_corpus(name: str) -> tuple[str, Tokenizer]:
    """The preset's corpus text and a tokenizer built for it."""
    preset = get_preset(name)
    text = corpus_text(preset.corpus)
    return text, default_tokenizer(preset.tokenizer, text)
