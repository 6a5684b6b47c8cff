"""Named recipes: a corpus, a tokenizer, a model shape and a training schedule.

    model_config, train_config = preset_configs("shakespeare-char-cpu", vocab_size=65, max_iters=500)

Overrides go to whichever config has a field of that name. Shortening `max_iters` alone also
moves `lr_decay_iters` with it, so a shorter run still ends its cosine decay at `min_lr`.

Never imports the model or the training loop (a preset is configs and a corpus), gradio, plotly or `playground`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.config import LLAMA_PARTS, GPTConfig, TrainConfig
from core.data import corpus_text, default_tokenizer
from core.tokenizers import Tokenizer

# nanoGPT's model choices: no biases, LM head tied to the token embedding.
NANOGPT_MODEL = dict(bias=False, qkv_bias=False, lm_head_bias=False, tie_weights=True)
# nanoGPT's Shakespeare schedule and optimizer: both of its recipes share these.
NANOGPT_TRAIN = dict(learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, weight_decay=0.1, beta1=0.9, beta2=0.99,
                     grad_clip=1.0)
# nanoGPT's CPU recipe, untied (see the preset); `llama-style` is the same recipe with today's parts.
CPU_MODEL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, **{**NANOGPT_MODEL, "tie_weights": False})
CPU_TRAIN = dict(max_iters=2000, lr_decay_iters=2000, batch_size=12, eval_interval=250, eval_iters=20, **NANOGPT_TRAIN)
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

# The induction task's recipe, shared by its variant with rotary positions (see the presets).
INDUCTION_MODEL = dict(TASK_MODEL, n_head=1, n_embd=96, block_size=40, init="pytorch")
INDUCTION_TRAIN = dict(TASK_TRAIN, max_iters=1200, lr_decay_iters=1200, batch_size=32, warmup_iters=30,
                       eval_interval=50, eval_iters=5, answers_only=True)


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
            model=CPU_MODEL, train=CPU_TRAIN,
        ),
        Preset(
            "llama-style", "Shakespeare, Llama-style",
            "The CPU recipe's sizes and schedule with today's parts, as Llama, Mistral and SmolLM2 build a "
            "block: rotary positions (no position table: each head's query and key turn with the position), "
            "RMSNorm, a SwiGLU feed-forward, 4 query heads sharing 2 key/value heads, no biases. Train it "
            "after the CPU recipe and open Compare runs: the curves, and how the heads attend. It ends at "
            "validation loss 1.71-1.75 where the CPU recipe ends at 1.89-1.90, with 9% fewer parameters "
            "(seeds 1337, 1 and 2; the SwiGLU and RoPE do most of it).",
            "shakespeare", "char",
            model=dict(CPU_MODEL, **LLAMA_PARTS, n_kv_head=2), train=CPU_TRAIN,
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
            "binary", "Binary sequence: the baby GPT's model in random batches",
            "Karpathy's baby GPT (two tokens, a context of 3, 4 layers of 4 heads in 16 channels) on its "
            "sequence 111101111011110 repeated, trained the way this tab trains: random windows, the loss "
            "at every position. For about 120 steps it learns only that 1 is four times as common as 0 "
            "(p(1) about 0.8 in every state); then it tells 111 apart: after 200 steps 101 -> 1 at about "
            "0.95 and 111 -> 1 at about 0.55, where the data says 1.0 and 0.5. Karpathy's own recipe "
            "(every window in one batch, the loss at the last position, 50 steps) is the Baby GPT tab, "
            "which draws the model as its Markov chain.",
            "binary", "char",
            model=dict(
                n_layer=4, n_head=4, n_embd=16, block_size=3, dropout=0.0,
                bias=False, qkv_bias=False, lm_head_bias=False,
            ),
            # Random batches give Adam a noisy gradient: the 111 state, a small steady signal under
            # the noise, takes about 120 steps to split off where one full batch takes 50 (measured
            # on seeds 1337, 1, 2: tests/bench/README.md).
            train=dict(
                max_iters=200, batch_size=12, learning_rate=1e-3, min_lr=1e-3, warmup_iters=0,
                lr_decay_iters=200, weight_decay=0.1, grad_clip=0.0, eval_interval=20, eval_iters=4,
            ),
        ),
        Preset(
            "repeat", "Copy task: a head that copies",
            "Random 8-letter words written twice (abcdefgh|abcdefgh). The loss counts the copied half "
            "only, where its question is in view: the first half is random, so no model could predict "
            "it. One layer is enough: to copy, a head looks 8 places back, at the letter after the "
            "earlier copy of the current one. When that head forms, around step 60, the loss drops "
            "suddenly and the answers go from guessed to right: every answer by step 70-80, and all "
            "three loss lines fall to near 0. Every word has 8 letters, so this is a fixed offset, not "
            "a true induction head, which needs two layers: the Attention tab's induction probe finds "
            "none here, while the `induction` preset (words of 3 to 12 letters) grows a real one. The live "
            "sample shows it answering validation questions. It was never taught the random first "
            "halves, so from an empty prompt on the Generate tab it repeats one made-up word: give it an "
            "8-letter word and `|` there (qwhzbkad|) to watch it copy. The tab starts your prompt on a new line "
            "(↵), as every line the model trained on was: the line break marks where the word begins.",
            # The workshop default: sixty learners train it at once on two cores, so it is small
            # (~2 s of one core). Counting the answers alone, one layer copies perfectly by step
            # 70-80 on every seed tried; two layers on all targets, not within 500 (tests/bench/README.md).
            "repeat", "char", model=dict(TASK_MODEL, n_layer=1, n_embd=64),
            train=dict(TASK_TRAIN, max_iters=250, lr_decay_iters=250, batch_size=32, learning_rate=3e-3,
                       min_lr=3e-4, warmup_iters=30, eval_iters=5, answers_only=True),
        ),
        Preset(
            "induction", "Copy task: an induction head",
            "Random words of 3 to 12 letters written twice (qwe|qwe, bdkzwaxfmo|bdkzwaxfmo); the loss "
            "counts the copied half only. The words' lengths vary, so no fixed offset finds the letter "
            "to copy: the model must find where the current letter appeared before and copy the letter "
            "that followed it. That takes two heads working together, one per layer: in layer 0 a "
            "previous-token head writes into each position the letter before it; in layer 1 an "
            "induction head looks for the position whose previous letter is the current one. For about "
            "150 steps the loss creeps down from 3.3 and the answers are mostly guesses; then, around "
            "step 150-200, the two heads click together: within 100-150 steps the loss falls below 0.5 "
            "and the answers become right, a phase change. By step 400 the Attention tab's probe (fresh "
            "random tokens written twice) names the layer-1 head an induction head. Compare the "
            "`repeat` preset: every word there has 8 letters, so a single head looking 8 places back "
            "copies just as well, and the probe finds no induction head, nor in `induction-rope`, which "
            "counts with rotary positions. About 20 s of one CPU core "
            "with fast bfloat16 (Intel's AMX), 35-70 s on one without it (float32).",
            # One head per layer: the smallest model with the circuit, and each head does one thing.
            # PyTorch's initialisation (embeddings of std 1): with GPT-2's (std 0.02) this model grew
            # no induction head in 1,200-1,500 steps at 64 to 192 channels; it learned to copy by
            # counting from the separator, which the probe rejects (tests/bench/README.md). A context
            # of 40: the shortest in which every window holds a line whole up to its first answer, so
            # the loss can count the answers alone.
            "induction", "char", model=INDUCTION_MODEL, train=INDUCTION_TRAIN,
        ),
        Preset(
            "induction-rope", "Copy task: rotary positions count instead",
            "The `induction` preset with rotary positions (RoPE, as in Llama) in place of the learned "
            "position table; nothing else changes. It copies too: 90-95% of the answers right by step "
            "600, 97-99% by the end. But the Attention tab's probe finds no induction head. RoPE gives every "
            "head the distance between two letters for free, so the layer-1 head learns a shortcut: it "
            "looks as far back as the separator is from the line's start, counting, not searching for the "
            "letter. See it on the Attention tab with two lines, `abcdefg|abcdefg` and below it the same "
            "word with its second half shuffled, `abcdefg|gcaebfd` (an example there). On the second line "
            "this model's layer-1 head keeps to its diagonal, where the `induction` preset's head jumps to "
            "the letter after each one's earlier copy. On the first line, with no line break before it to "
            "count from, it does not copy at all. A model that gets the answers right has not always "
            "learned the algorithm you had in mind. It trains about 10% slower than `induction`.",
            # Measured on seeds 1337, 1 and 2 (tests/bench/bench_tasks.py, tests/bench/README.md): on
            # shuffled lines its head puts 0.44-0.47 of its attention on the counted position and 0.06-0.07
            # on the letter; the learned-position preset's head, 0.00 and 0.93.
            "induction", "char",
            model=dict(INDUCTION_MODEL, position="rope"), train=INDUCTION_TRAIN,
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
            "in value, unlike the crisp copy and reverse patterns. It is not perfect by step 400: 84-94% "
            "of new lines come out sorted right, and its mistakes are in counting, a digit that appears "
            "more than once written once too often or too few times. Raise Steps to 800 and press Train "
            "to go on: 96-99.5%.",
            # Greedy answers to 200 fresh questions, seeds 1337 / 1 / 2: 188 / 172 / 168 right at 400 steps,
            # 198 / 199 / 192 at 800 (tests/bench/README.md).
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
