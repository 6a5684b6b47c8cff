"""Do the synthetic-task presets really train to crisp attention patterns, and how fast?

    python tests/bench/bench_tasks.py                 # every task preset: repeat, induction, induction-rope, ...
    python tests/bench/bench_tasks.py repeat --set n_embd=32 --set max_iters=400
    python tests/bench/bench_tasks.py induction --seeds 1337,1,2 --set eval_interval=25

For each preset (its task is its corpus): wall time, validation loss, greedy accuracy on the deterministic second half of
each line, and the attention score of the best head for the pattern the task needs:

- repeat, induction: the induction target, the token after the earlier copy of the current token
  (i - w for a word of w letters; every `repeat` word has 8 letters, so a fixed-offset head finds
  it too; `induction` words have 3 to 12)
- reverse: the anti-diagonal, the mirror position in the first half (15 - i within a line)
- sort: the attention mass on first-half positions holding the digit written next

A score near 1 means one head puts (almost) all its attention where the task says it should;
"best head per query" lets a different head serve each position of the line (a pattern split
across heads, which the UI shows as several crisp partial diagonals).

Every evaluation also prints the induction probe, the Attention tab's test on fresh text
(`core.attention.probe_induction`: random tokens written twice, at two repeat lengths): the best
score of a head past layer 0, which `is_induction_head` calls an induction head from 0.5 on. The
phase change is the first evaluation at which the second-half accuracy passes 0.5. On the
induction task it ends with the shuffle test (`shuffled_halves`): does the best head follow the
letter, as an induction head does, or the position, as a head that counts does? Then activation
patching on the Attention tab's copy pair (`playground.tabs.attention.patching.PAIRS[0]`): which head's
clean output brings back most of the answer, beside the head the probe scores highest.

Then the prompts a learner types on the Generate tab, greedily (`typed_prompts`): each example of the
task that the README and the preset texts show (its question and separator, typed exactly as shown)
and 20 random questions of the task. An answer is right when the model writes the task's answer and
ends the line. The Generate tab puts a line break before a task model's prompt (`Task.as_line`), as
every training line had one; the figure without it shows why.
"""

from __future__ import annotations

import argparse
import ast
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from core.attention import is_induction_head, probe_induction  # noqa: E402
from core.attribution import patch  # noqa: E402
from core.data import CORPORA, Task, TokenData  # noqa: E402
from core.model import GPT  # noqa: E402
from core.observers import standard  # noqa: E402
from core.presets import PRESETS, preset_configs, preset_corpus  # noqa: E402
from core.sample import generate  # noqa: E402
from core.tokenizers import Tokenizer  # noqa: E402
from core.train import Trainer  # noqa: E402
from playground.tabs.attention.patching import PAIRS  # noqa: E402

PHASE_CHANGE = 0.5  # the second-half accuracy that marks the phase change
README = Path(__file__).resolve().parents[2] / "README.md"
N_RANDOM_QUESTIONS = 20  # the default of --questions


def targets(task: str, line: torch.Tensor, word: int) -> list[tuple[int, list[int]]]:
    """(query offset, key offsets the task needs) for the queries that predict the second half
    of a line whose first half has `word` tokens."""
    queries = range(word, 2 * word)  # the separator and the second-half letters predict the next letter
    if task in ("repeat", "induction"):
        return [(i, [i - word]) for i in queries]
    if task == "reverse":
        return [(i, [2 * word - 1 - i]) for i in queries]
    # sort: where the digit written next sits in the unsorted first half
    return [(i, [j for j in range(word) if line[j] == line[i + 1]]) for i in queries]


@torch.no_grad()
def measure(task: str, model: GPT, val: torch.Tensor, newline: int, separator: int,
            n_lines: int = 200) -> tuple[float, float, float, str]:
    """(greedy accuracy on second halves, best head's mean attention on the task's targets,
    the same with the best head chosen per query: a pattern split across heads, the best head
    as 'L1 H0').

    Each window starts at the newline before a line, so the model sees where the line starts, as
    in training (the loss counts a line's answers only with its newline in the window)."""
    T = model.config.block_size
    val = val.to(next(model.parameters()).device)
    starts = (val == newline).nonzero().flatten()[:n_lines]
    windows = torch.stack([val[s: s + T] for s in starts.tolist() if s + T <= len(val)])
    logits, _, patterns = model(windows, return_attention=True)  # patterns: per layer (B, H, T, T)
    predicted = logits.argmax(-1)
    heads = torch.cat(patterns, dim=1)  # (B, L * H, T, T)
    correct, on_target = [], []  # per query: right or not; (L * H,) attention on the task's targets
    for b, window in enumerate(windows):
        line = window[1:]  # after the newline: offsets in the line are positions - 1 in the window
        word = (line == separator).nonzero()[0].item()
        for i, keys in targets(task, line, word):
            correct.append(predicted[b, i + 1] == line[i + 1])
            on_target.append(heads[b, :, i + 1, [k + 1 for k in keys]].sum(-1))
    on_target = torch.stack(on_target)  # (queries, L * H)
    per_head = on_target.mean(0)
    best = int(per_head.argmax())
    return (torch.stack(correct).float().mean().item(), per_head[best].item(),
            on_target.max(1).values.mean().item(), f"L{best // model.config.n_head} H{best % model.config.n_head}")


@torch.no_grad()
def shuffled_halves(model: GPT, val: torch.Tensor, newline: int, separator: int, head: str,
                    n_lines: int = 200, seed: int = 0) -> tuple[float, float]:
    """How `head` ('L1 H0') reads on lines whose second half is the word shuffled: (its mean
    attention on the letter after the earlier copy of the current letter, on the position the
    unshuffled copy would use). An induction head follows the letter; a head that copies by
    counting from the separator keeps looking at the same position. Queries where the two
    coincide are left out."""
    layer, index = (int(part[1:]) for part in head.split())
    T = model.config.block_size
    val = val.to(next(model.parameters()).device)
    generator = torch.Generator().manual_seed(seed)
    letter_share, position_share = [], []
    for start in (val == newline).nonzero().flatten()[:n_lines].tolist():
        window = val[start: start + T].clone()
        if len(window) < T:
            break
        word = (window[1:] == separator).nonzero()[0].item()
        first, second = window[1: 1 + word], window[2 + word: 2 + 2 * word]
        second.copy_(first[torch.randperm(word, generator=generator)])  # writes into window
        _, _, patterns = model(window[None], return_attention=True)
        weights = patterns[layer][0, index]  # (T, T)
        for k in range(word - 1):  # the query at the second half's k-th letter
            query = 2 + word + k
            by_letter = 1 + (first == window[query]).nonzero()[0].item() + 1
            by_position = 1 + k + 1
            if by_letter != by_position:
                letter_share.append(weights[query, by_letter])
                position_share.append(weights[query, by_position])
    return torch.stack(letter_share).mean().item(), torch.stack(position_share).mean().item()


def shown_examples(task: Task, text: str) -> list[tuple[str, str]]:
    """(question, the answer shown after it, maybe '') for each line of `task` that `text` shows: a question
    of the task's characters, its separator, then the answer if the text writes one (`"qwhzbkad|"`)."""
    alphabet = re.escape(task.alphabet)  # a range would need its ends; the characters themselves will do
    found = re.findall(rf"(?<![\w&])([{alphabet}]+){re.escape(task.separator)}([{alphabet}]*)(?![\w])", text)
    return [(question, shown) for question, shown in found if task.shortest <= len(question) <= task.longest]


def preset_examples(name: str) -> list[str]:
    """The questions of preset `name`'s task that the README and the preset's description show, each once."""
    task = CORPORA[PRESETS[name].corpus].task
    found = shown_examples(task, README.read_text()) + shown_examples(task, PRESETS[name].description)
    return list(dict.fromkeys(question for question, _ in found))


@torch.no_grad()
def typed_answer(model: GPT, tokenizer: Tokenizer, task: Task, prompt: str, line_start: bool = True) -> str:
    """What the model writes greedily after `prompt`, given as the Generate tab gives it to a task model
    (after a line break; `line_start=False`: as typed), up to and with the line break that ends the line."""
    ids = tokenizer.encode(task.as_line(prompt) if line_start else prompt)
    device = next(model.parameters()).device
    written = generate(model.eval(), torch.tensor([ids], device=device), task.longest + 1, temperature=0)
    text = tokenizer.decode(written[0, len(ids):].tolist())
    return text[:text.index("\n") + 1] if "\n" in text else text


def typed_prompts(name: str, model: GPT, tokenizer: Tokenizer, seed: int, n_random: int) -> str:
    """How many of the preset's shown examples, and of `n_random` random questions, the model answers right
    when each is typed as a learner types it (question and separator); and how many without the line break."""
    task = CORPORA[PRESETS[name].corpus].task
    rng = random.Random(f"typed questions {seed}")  # fresh questions, not the corpus's (its seed is 0)
    randoms = [task.question(rng) for _ in range(n_random)]

    def wrong(questions: list[str], line_start: bool = True) -> list[str]:
        return [question + task.separator for question in questions
                if typed_answer(model, tokenizer, task, question + task.separator, line_start)
                != task.answer(question) + "\n"]

    shown = preset_examples(name)
    wrong_shown, wrong_random = wrong(shown), wrong(randoms)
    wrong_bare = wrong(shown + randoms, line_start=False)
    return (f"typed: shown examples {len(shown) - len(wrong_shown)}/{len(shown)} right "
            f"({', '.join(q + task.separator for q in shown)}), random questions "
            f"{len(randoms) - len(wrong_random)}/{len(randoms)} right; without the line break before them "
            f"{len(shown) + len(randoms) - len(wrong_bare)}/{len(shown) + len(randoms)} right"
            + (f"; wrong: {', '.join(wrong_shown + wrong_random)}" if wrong_shown or wrong_random else ""))


def induction_probe(model: GPT) -> str:
    """The Attention tab's verdict: the best probe score past layer 0 and the induction heads."""
    scores = probe_induction(model)
    if scores is None:
        return "probe - (the context is too short for it)"
    if scores.size(0) < 2:
        return "probe - (one layer: no head can be an induction head)"
    heads = [f"L{layer} H{head}" for layer in range(1, scores.size(0)) for head in range(scores.size(1))
             if is_induction_head(layer, float(scores[layer, head]))]
    return f"probe {scores[1:].max().item():.2f} (induction heads: {', '.join(heads) or 'none'})"


def patching_against_the_probe(model: GPT, tokenizer) -> str:
    """Head patching on the copy pair, heads ranked by the share they restore, and whether the first is
    the head the induction probe scores highest (past layer 0)."""
    clean, corrupted = (tokenizer.encode(text) for text in PAIRS[0])
    heads = patch(model, clean, corrupted).heads  # (L, H)
    ranked = sorted(((value, f"L{layer} H{head}") for (layer, head), value in
                     ((divmod(i, heads.size(1)), v) for i, v in enumerate(heads.flatten().tolist()))), reverse=True)
    scores = probe_induction(model)
    layer, head = divmod(int(scores[1:].flatten().argmax()), scores.size(1))
    named = f"L{layer + 1} H{head}"
    verdict = "the same head" if ranked[0][1] == named else "a DIFFERENT head"
    return (f"patching {PAIRS[0][0]!r} into {PAIRS[0][1]!r} restores: "
            + ", ".join(f"{name} {value:.3f}" for value, name in ranked[:3])
            + f"; the probe's best is {named} ({scores[layer + 1, head]:.2f}): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("presets", nargs="*", default=["repeat", "induction", "induction-rope", "reverse", "sort"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="preset override")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds, one run each (default: the preset's)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto (default: cpu)")
    parser.add_argument("--questions", type=int, default=N_RANDOM_QUESTIONS,
                        help=f"random questions typed after training (default: {N_RANDOM_QUESTIONS})")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = ast.literal_eval(value)  # numbers and booleans from the command line
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.seeds else [None]
    for name in args.presets:
        for seed in seeds:
            run(name, {"device": args.device, **overrides, **({} if seed is None else {"seed": seed})}, args.questions)


def run(name: str, overrides: dict, n_questions: int) -> None:
    """Train one preset (as the app does: weights and batches from the seed), printing each evaluation.
    The task is the preset's corpus: `induction-rope` is the `induction` task."""
    task = PRESETS[name].corpus
    text, tokenizer = preset_corpus(name)
    model_config, train_config = preset_configs(name, tokenizer.vocab_size, **overrides)
    data = TokenData.from_text(text, tokenizer, model_config.block_size, answer_after=CORPORA[task].answer_after)
    model = GPT(model_config, generator=torch.Generator().manual_seed(train_config.seed))
    newline, separator = tokenizer.encode("\n" + CORPORA[task].answer_after)
    phase_change = None
    for event in Trainer(model, data, train_config, observers=standard(train_config)).run():
        if event.val_loss is not None and not event.done:
            accuracy, score, per_query, best = measure(task, model.eval(), data.val, newline, separator)
            probe = induction_probe(model)
            model.train()
            if phase_change is None and accuracy >= PHASE_CHANGE:
                phase_change = event.step
            answers = "" if event.answer_accuracy is None else f"answer accuracy {event.answer_accuracy:.3f} "
            print(f"  {name} seed {train_config.seed} step {event.step:4d} val loss {event.val_loss:.3f} {answers}"
                  f"second-half accuracy {accuracy:.3f} best head {score:.3f} ({best}) best head per query "
                  f"{per_query:.3f} {probe}", flush=True)
    accuracy, score, per_query, best = measure(task, model.eval(), data.val, newline, separator)
    print(f"{name} seed {train_config.seed}: {event.elapsed:.1f} s of training for {train_config.max_iters} steps "
          f"({model.parameter_counts()['total']:,} parameters); second-half accuracy {accuracy:.3f} "
          f"(phase change at step {phase_change}), best head {score:.3f} ({best}), best head per query "
          f"{per_query:.3f}, {induction_probe(model)}", flush=True)
    typed = typed_prompts(name, model, tokenizer, train_config.seed, n_questions)
    print(f"{name} seed {train_config.seed}: {typed}", flush=True)
    if task == "induction":
        letter, position = shuffled_halves(model, data.val, newline, separator, best)
        print(f"{name} seed {train_config.seed}: on lines whose second half is shuffled, {best} puts {letter:.2f} "
              f"of its attention on the letter after the current one's earlier copy, {position:.2f} on the "
              "position the unshuffled copy would use", flush=True)
        print(f"{name} seed {train_config.seed}: {patching_against_the_probe(model.eval(), tokenizer)}", flush=True)


if __name__ == "__main__":
    main()
