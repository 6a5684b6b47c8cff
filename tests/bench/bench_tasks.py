"""Do the synthetic-task presets really train to crisp attention patterns, and how fast?

    python tests/bench/bench_tasks.py                 # repeat, reverse, sort with their presets
    python tests/bench/bench_tasks.py repeat --set n_embd=32 --set max_iters=400

For each task: wall time, validation loss, greedy accuracy on the deterministic second half of
each line, and the attention score of the best head for the pattern the task needs:

- repeat: the induction target, the token after the earlier copy of the current token (i - w
  for a word of w letters; every word has 8 letters, so a fixed-offset head finds it too)
- reverse: the anti-diagonal, the mirror position in the first half (15 - i within a line)
- sort: the attention mass on first-half positions holding the digit written next

A score near 1 means one head puts (almost) all its attention where the task says it should;
"best head per query" lets a different head serve each position of the line (a pattern split
across heads, which the UI shows as several crisp partial diagonals).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from core.data import CORPORA, TokenData  # noqa: E402
from core.model import GPT  # noqa: E402
from core.presets import preset_configs, preset_corpus  # noqa: E402
from core.train import Trainer  # noqa: E402

SEPARATORS = {"repeat": "|", "reverse": ">", "sort": "="}


def targets(task: str, line: torch.Tensor, word: int) -> list[tuple[int, list[int]]]:
    """(query offset, key offsets the task needs) for the queries that predict the second half
    of a line whose first half has `word` tokens."""
    queries = range(word, 2 * word)  # the separator and the second-half letters predict the next letter
    if task == "repeat":
        return [(i, [i - word]) for i in queries]
    if task == "reverse":
        return [(i, [2 * word - 1 - i]) for i in queries]
    # sort: where the digit written next sits in the unsorted first half
    return [(i, [j for j in range(word) if line[j] == line[i + 1]]) for i in queries]


@torch.no_grad()
def measure(task: str, model: GPT, val: torch.Tensor, newline: int, separator: int,
            n_lines: int = 200) -> tuple[float, float, float]:
    """(greedy accuracy on second halves, best head's mean attention on the task's targets,
    the same with the best head chosen per query: a pattern split across heads)."""
    T = model.config.block_size
    val = val.to(next(model.parameters()).device)
    starts = (val == newline).nonzero().flatten()[:n_lines] + 1  # each line starts after a newline
    windows = torch.stack([val[s: s + T] for s in starts.tolist() if s + T <= len(val)])
    logits, _, patterns = model(windows, return_attention=True)  # patterns: per layer (B, H, T, T)
    predicted = logits.argmax(-1)
    heads = torch.cat(patterns, dim=1)  # (B, L * H, T, T)
    correct, on_target = [], []  # per query: right or not; (L * H,) attention on the task's targets
    for b, line in enumerate(windows):
        word = (line == separator).nonzero()[0].item()
        for i, keys in targets(task, line, word):
            correct.append(predicted[b, i] == line[i + 1])
            on_target.append(heads[b, :, i, keys].sum(-1))
    on_target = torch.stack(on_target)  # (queries, L * H)
    return (torch.stack(correct).float().mean().item(), on_target.mean(0).max().item(),
            on_target.max(1).values.mean().item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", default=["repeat", "reverse", "sort"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="preset override")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto (default: cpu)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = ast.literal_eval(value)  # numbers and booleans from the command line
    for task in args.tasks:
        text, tokenizer = preset_corpus(task)
        model_config, train_config = preset_configs(task, tokenizer.vocab_size, **{"device": args.device, **overrides})
        data = TokenData.from_text(text, tokenizer, model_config.block_size, answer_after=CORPORA[task].answer_after)
        torch.manual_seed(train_config.seed)
        model = GPT(model_config)
        newline, separator = tokenizer.encode("\n" + SEPARATORS[task])
        for event in Trainer(model, data, train_config).run():
            if event.val_loss is not None and not event.done:
                accuracy, score, per_query = measure(task, model.eval(), data.val, newline, separator)
                model.train()
                print(f"  {task} step {event.step:4d} val loss {event.val_loss:.3f} second-half accuracy "
                      f"{accuracy:.3f} best head {score:.3f} best head per query {per_query:.3f}", flush=True)
        accuracy, score, per_query = measure(task, model.eval(), data.val, newline, separator)
        print(f"{task}: {event.elapsed:.1f} s of training for {train_config.max_iters} steps "
              f"({model.parameter_counts()['total']:,} parameters); second-half accuracy {accuracy:.3f}, "
              f"best head {score:.3f}, best head per query {per_query:.3f}", flush=True)


if __name__ == "__main__":
    main()
