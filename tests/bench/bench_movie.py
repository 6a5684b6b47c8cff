"""When does the induction head form? The attention movie's detector against the loss, over seeds.

    python tests/bench/bench_movie.py                       # the induction preset, seeds 1337 1 2
    python tests/bench/bench_movie.py --seeds 3 4 --every 5

Trains the `induction` preset as the Train tab does (its probe: the start of the validation split,
whose copy lines give induction targets), snapshots attention every `--every` steps into a
`core.movie.AttentionMovie`, and prints for each seed: the step `induction_onset` names (the first
snapshot from which a layer-1 head keeps an induction score of at least 0.5 on the probe), the
phase change in the loss (the first evaluation with answer accuracy above 0.5, and the step of the
steepest fall of the smoothed training loss), and the movie's size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from core.data import CORPORA, TokenData  # noqa: E402
from core.model import GPT  # noqa: E402
from core.movie import AttentionMovie, induction_onset  # noqa: E402
from core.observers import AttentionProbe, standard  # noqa: E402
from core.presets import get_preset, preset_configs, preset_corpus  # noqa: E402
from core.train import Trainer  # noqa: E402

SMOOTHING = 20  # steps in the moving average of the training loss


def steepest_fall(losses: list[float]) -> int:
    """The step (1-based) at the middle of the smoothed loss's steepest fall over SMOOTHING steps."""
    smooth = torch.tensor(losses).unfold(0, SMOOTHING, 1).mean(-1)  # moving averages
    fall = smooth[:-SMOOTHING] - smooth[SMOOTHING:]
    return int(fall.argmax()) + SMOOTHING + 1


def run(preset: str, seed: int, every: int) -> dict:
    text, tokenizer = preset_corpus(preset)
    model_config, train_config = preset_configs(preset, tokenizer.vocab_size, seed=seed, device="cpu")
    data = TokenData.from_text(text, tokenizer, model_config.block_size,
                               answer_after=CORPORA[get_preset(preset).corpus].answer_after)
    model = GPT(model_config, generator=torch.Generator().manual_seed(seed))
    trainer, snapshots = Trainer(model, data, train_config, observers=standard(train_config)), AttentionProbe()
    movie = AttentionMovie(snapshots.probe_ids(trainer), every=every)
    losses, accuracy_step = [], None
    for event in trainer.run():
        if event.done:
            break
        losses.append(event.train_loss)
        if accuracy_step is None and event.answer_accuracy is not None and event.answer_accuracy > 0.5:
            accuracy_step = event.step
        if movie.wants(event.step) or event.step == train_config.max_iters:
            movie.add(event.step, snapshots.attention(trainer))
    return dict(seed=seed, onset=induction_onset(movie), accuracy=accuracy_step, fall=steepest_fall(losses),
                frames=len(movie.frames), kib=movie.nbytes / 1024, every=movie.every)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="induction")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1337, 1, 2])
    parser.add_argument("--every", type=int, default=10, help="steps between snapshots (doubles as memory fills)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.preset}: snapshots every {args.every} steps; evaluation every "
          f"{preset_configs(args.preset, 2)[1].eval_interval} steps")
    print(f"{'seed':>6} {'onset (movie)':>14} {'accuracy > 0.5':>15} {'steepest fall':>14} {'frames':>7} {'KiB':>7}")
    for seed in args.seeds:
        r = run(args.preset, seed, args.every)
        onset = "none" if r["onset"] is None else str(r["onset"])
        print(f"{r['seed']:>6} {onset:>14} {str(r['accuracy']):>15} {r['fall']:>14} {r['frames']:>7} {r['kib']:>7.0f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
