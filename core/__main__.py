"""Command line: train a preset, sample from a checkpoint, export it, climb the seeds' ladder, list the presets.

    python -m core train --preset shakespeare-char-cpu --out out/shakespeare
    python -m core sample --checkpoint out/shakespeare --prompt "ROMEO:" --max-new-tokens 300 --seed 1
    python -m core sample --gguf SmolLM2-135M-Instruct.Q4_1.gguf --prompt "The capital of France is" --temperature 0
    python -m core export out/shakespeare --to transformers out/shakespeare-hf --push-to-hub me/tiny-shakespeare
    python -m core ladder --steps 10000 --seed 1337 --json
    python -m core presets

The top of core: it may import any of core. Never imports gradio, plotly or `playground`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from core import checkpoint, distributed
from core.config import GPTConfig, TrainConfig
from core.device import resolve_device
from core.data import CORPORA, TokenData, default_tokenizer, load_shakespeare, read_text_file
from core.export import push_to_hub, target, to_transformers
from core.ladder import DEFAULT_STEPS, RUNGS, SCHEDULES, Ladder
from core.model import GPT
from core.observers import standard
from core.gguf import load_gguf
from core.pretrained import PretrainedUnavailable, load_gpt2
from core.presets import PRESETS, get_preset, preset_configs, preset_corpus
from core.sample import stream
from core.tokenizers import Tokenizer
from core.train import TrainEvent, Trainer

BAR_WIDTH = 24


def _setting(text: str) -> tuple[str, object]:
    """'key=value' for --set, the value typed like the config field it overrides."""
    key, sep, raw = text.partition("=")
    defaults = {**GPTConfig().to_dict(), **TrainConfig().to_dict()}
    defaults.pop("vocab_size")  # comes from the tokenizer
    if not sep or key not in defaults:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY one of {sorted(defaults)}")
    kind = type(defaults[key])
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{key} must be true or false, got {raw!r}")
        return key, raw.lower() == "true"
    try:
        return key, kind(raw)
    except ValueError:
        what = {int: "an integer", float: "a number"}.get(kind, kind.__name__)
        raise argparse.ArgumentTypeError(f"{key} must be {what}, got {raw!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core",
        description="Train tiny GPTs and sample from them (the engine behind Attention Playground).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m core presets\n"
        "  python -m core train --preset shakespeare-char-cpu --out out/shakespeare\n"
        "  python -m core train --resume out/shakespeare --max-iters 3000\n"
        "  python -m core train --preset repeat --max-iters 300 --set n_layer=3 --set learning_rate=1e-3\n"
        "  python -m core sample --checkpoint out/shakespeare --prompt 'ROMEO:' --max-new-tokens 300 --seed 1\n"
        "  python -m core export out/shakespeare --to transformers out/shakespeare-hf\n"
        "  python -m core ladder --steps 10000 --seed 1337 --json",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train", help="train a preset and save a checkpoint",
        description="Train a preset (python -m core presets lists them) and save a checkpoint folder, "
        "at every evaluation and at the end (Ctrl-C saves too). The folder holds the training state, "
        "so --resume goes on exactly where it stopped.",
    )
    start = train.add_mutually_exclusive_group(required=True)
    start.add_argument("--preset", choices=list(PRESETS), metavar="NAME", help=f"one of: {', '.join(PRESETS)}")
    start.add_argument("--resume", type=Path, metavar="DIR",
                       help="go on training a checkpoint folder written by 'train': same preset, data and "
                            "settings (training settings given here override them; --max-iters extends the run)")
    train.add_argument("--out", type=Path, help="checkpoint folder (default: out/<preset>, or the --resume folder)")
    train.add_argument("--text", type=Path, metavar="FILE", help="train on this UTF-8 text file instead of the preset's corpus")
    train.add_argument("--max-iters", type=int, help="optimizer steps (the learning-rate decay follows)")
    train.add_argument("--batch-size", type=int)
    train.add_argument("--learning-rate", type=float)
    train.add_argument("--eval-interval", type=int, help="steps between validation estimates")
    train.add_argument("--seed", type=int)
    train.add_argument("--device", help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    train.add_argument("--dtype", choices=["auto", "float32", "bfloat16"],
                       help="autocast dtype (auto: bfloat16 on CUDA and on CPUs with Intel's AMX; "
                            "float32 elsewhere)")
    train.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model")
    train.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    train.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                       help="any other model or training setting, e.g. --set n_layer=6 --set dropout=0.1")

    sample = commands.add_parser(
        "sample", help="generate text from a checkpoint, GPT-2 or a GGUF file",
        description="Stream text from a checkpoint folder or .zip, OpenAI's pretrained GPT-2 or a Llama-architecture "
                    "GGUF file (llama.cpp's, Ollama's), to stdout.",
    )
    source = sample.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, help="folder or .zip written by 'train'")
    source.add_argument("--gpt2", metavar="NAME_OR_FOLDER",
                        help="OpenAI's GPT-2: a Hugging Face Hub id (gpt2, gpt2-medium, ...) or a folder holding "
                             "config.json and model.safetensors")
    source.add_argument("--gguf", type=Path, metavar="PATH", help="a Llama-architecture GGUF file (e.g. SmolLM2's)")
    sample.add_argument("--prompt", default="", help="text to continue (default: the start-of-text token)")
    sample.add_argument("--max-new-tokens", type=int, default=500)
    sample.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    sample.add_argument("--top-k", type=int, help="keep only the k most likely tokens")
    sample.add_argument("--top-p", type=float, help="keep the most likely tokens up to this probability mass")
    sample.add_argument("--seed", type=int, help="for a reproducible sample")
    sample.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    sample.add_argument("--no-cache", action="store_true", help="re-run the whole context for every token")

    export = commands.add_parser(
        "export", help="write a checkpoint as a Hugging Face transformers model, and upload it",
        description="Write a checkpoint as a folder that transformers loads with AutoModelForCausalLM (a "
        "GPT2LMHeadModel, LlamaForCausalLM or MistralForCausalLM, whichever its options make it) and its tokenizer "
        "with AutoTokenizer, with a model card (README.md) and the loss curve. A model with options transformers "
        "cannot express is refused, naming them.",
    )
    export.add_argument("checkpoint", type=Path, metavar="CHECKPOINT",
                        help="folder or .zip written by 'train' or the app")
    export.add_argument("--to", choices=["transformers"], required=True,
                        help="the format (transformers, the only one)")
    export.add_argument("out", type=Path, metavar="OUT", help="the folder to write (created if needed)")
    export.add_argument("--push-to-hub", metavar="REPO",
                        help="then upload the folder to this Hugging Face Hub model repo (created if missing), e.g. "
                             "me/tiny-shakespeare, with the token in $HF_TOKEN or saved by `hf auth login`")

    ladder = commands.add_parser(
        "ladder", help="train the lecture's stages, bigram to GPT, and print each one's validation loss",
        description="Train every stage of the seeds' ladder (bigram, position embeddings, one head, four heads, "
        "feed-forward, residual connections + LayerNorm), then the GPT with today's parts (RoPE, RMSNorm, SwiGLU), "
        "in turn on Tiny Shakespeare at the lecture's sizes, and print one line per stage beside the lecture's figure.",
    )
    ladder.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"steps per stage (default {DEFAULT_STEPS:,})")
    ladder.add_argument("--seed", type=int, default=1337)
    ladder.add_argument("--stages", nargs="+", choices=list(RUNGS), metavar="STAGE",
                        help=f"some of: {', '.join(RUNGS)} (default: all)")
    ladder.add_argument("--schedule", choices=list(SCHEDULES), default="lecture",
                        help="lecture: AdamW at a constant 1e-3, as the lecture (for 10,000 steps); short: 3e-3 "
                        "decaying to 3e-4, the Ladder tab's (for a few thousand steps)")
    ladder.add_argument("--json", action="store_true",
                        help='one JSON object per line: {"stage", "val_loss", "params", "seconds"}')
    ladder.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, mps")
    ladder.add_argument("--shakespeare", type=Path, metavar="FILE",
                        help="Tiny Shakespeare's input.txt (default: $PLAYGROUND_DATA_DIR, the cache, or a download)")

    commands.add_parser("presets", help="list the presets")
    return parser


# ---------------------------------------------------------------- train


def _overrides(args: argparse.Namespace) -> dict:
    flags = {
        "max_iters": args.max_iters, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
        "eval_interval": args.eval_interval, "seed": args.seed, "device": args.device,
        "dtype": args.dtype, "compile": args.compile,
    }
    return {**dict(args.set), **{k: v for k, v in flags.items() if v is not None}}


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def _progress(event: TrainEvent, val_loss: float | None) -> str:
    filled = BAR_WIDTH * event.step // max(1, event.max_iters)
    val = f" val {val_loss:.4f}" if val_loss is not None else ""
    return (
        f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {event.step}/{event.max_iters} "
        f"loss {event.train_loss:.4f}{val} lr {event.lr:.1e} "
        f"{event.tokens_per_sec / 1000:.1f}k tok/s {_clock(event.elapsed)} elapsed, {_clock(event.eta)} left"
    )


def train(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.resume:
        model, tokenizer, meta = checkpoint.load(args.resume)
        state = checkpoint.load_trainer_state(args.resume)
        if state is None:
            raise ValueError(f"{args.resume} holds no training state (it was not written by 'train'); "
                             "it can be sampled from but not resumed")
        preset_name, text_file = meta.get("preset"), args.text or meta.get("text_file")
        get_preset(preset_name)  # a clear error if the checkpoint names no known preset
        text = read_text_file(text_file, min_chars=1) if text_file else preset_corpus(preset_name)[0]
        train_config = _resumed_config(meta, _overrides(args))
        model_config = model.config
    else:
        preset_name, text_file, state = args.preset, args.text, None
        preset = get_preset(preset_name)
        if text_file:
            text = read_text_file(text_file, min_chars=1)
            tokenizer = default_tokenizer(preset.tokenizer, text)
        else:
            text, tokenizer = preset_corpus(preset_name)
        model_config, train_config = preset_configs(preset_name, tokenizer.vocab_size, **_overrides(args))
        # the initial weights as the app draws them: the same seed gives the same model in both
        model = GPT(model_config, generator=torch.Generator().manual_seed(train_config.seed))
    # a task corpus's answers (for answers_only and the answer score); none in a user's own text
    answer_after = None if text_file else CORPORA[get_preset(preset_name).corpus].answer_after
    data = TokenData.from_text(text, tokenizer, model_config.block_size, answer_after=answer_after)
    resumed_folder = args.resume if args.resume and args.resume.is_dir() else None
    out = args.out or resumed_folder or Path("out") / preset_name
    meta = {"preset": preset_name, "text_file": str(text_file) if text_file else None,
            "train_config": train_config.to_dict()}
    with distributed.joined(train_config.device) as processes:
        # The trainer lives in the call alone: under DDP it must be gone when the block ends (see joined)
        trainer = Trainer(model, data, train_config, observers=standard(train_config, tokenizer=tokenizer),
                          processes=processes)
        return _train(trainer, tokenizer, state, out, meta)


def _train(trainer: Trainer, tokenizer: Tokenizer, state: dict | None, out: Path, meta: dict) -> int:
    """Go on from `state` (if any) and train: in process 0 (or the only one), with progress and checkpoints."""
    if state is not None:
        trainer.load_state_dict(state)
        if trainer.step >= trainer.config.max_iters:
            raise ValueError(f"the checkpoint has already trained {trainer.step} of {trainer.config.max_iters} steps; "
                             f"pass --max-iters with more than {trainer.step} to go on")
    processes = trainer.processes
    if not processes.main:
        return _train_alongside(trainer)
    if processes.distributed:
        world = processes.world_size
        print(f"Training with DDP on {world} process{'es' if world > 1 else ''} ({processes.backend}, "
              f"{trainer.device.type}): each step's global batch of {trainer.config.batch_size} rows is "
              f"{world} x {trainer.accumulation_steps} micro-batch(es) (gradient accumulation) "
              f"x {trainer.micro_batch} rows", file=sys.stderr)
    print(f"{meta['preset']}: {trainer.model.parameter_counts()['total']:,} parameters, "
          f"{len(trainer.train_data):,} training tokens, device {trainer.device}, {torch.get_num_threads()} CPU threads"
          + (f", resuming at step {trainer.step}" if state is not None else ""), file=sys.stderr)
    return _train_and_report(trainer, tokenizer, out, meta)


def _train_alongside(trainer: Trainer) -> int:
    """A DDP process besides process 0: it trains in step with the others, silently (process 0 reports
    and saves for all: they hold the same weights and state); the exit code is process 0's."""
    event = None
    with contextlib.suppress(KeyboardInterrupt):  # process 0 says so, and saves
        for event in trainer.run():
            pass
    return 1 if event is not None and event.error else 0


def _train_and_report(trainer: Trainer, tokenizer: Tokenizer, out: Path, meta: dict) -> int:
    """Run the training, printing progress and saving a checkpoint at every evaluation and at the end."""
    first_step = trainer.step
    interactive = sys.stderr.isatty()
    step_times: list[float] = []
    event, val_loss = None, None
    started = last = time.perf_counter()
    try:
        for event in trainer.run():
            if event.done:
                break
            now = time.perf_counter()
            if event.val_loss is None:  # steps with an evaluation would skew the median
                step_times.append(now - last)
            last = now
            val_loss = event.val_loss if event.val_loss is not None else val_loss
            if interactive:
                print("\r" + _progress(event, val_loss), end="", file=sys.stderr, flush=True)
            if event.val_loss is not None:
                print(("\r" if interactive else "") + _progress(event, val_loss), file=sys.stderr, flush=True)
                _save(out, trainer, tokenizer, meta, val_loss)  # a crash loses at most one interval
    except KeyboardInterrupt:
        print("\ninterrupted: saving the weights learned so far", file=sys.stderr)
    if interactive:
        print(file=sys.stderr)
    failed = event is not None and event.error is not None
    if failed:
        print(event.error, file=sys.stderr)

    wall = time.perf_counter() - started
    _save(out, trainer, tokenizer, meta, val_loss)
    median = statistics.median(step_times) if step_times else float("nan")
    tokens = trainer.config.batch_size * trainer.model.config.block_size
    print(
        f"{_steps_made(first_step, trainer.step)} in {wall:.1f} s: median {median * 1000:.1f} ms/iter, "
        f"{tokens / median:,.0f} tokens/s, final val loss {val_loss if val_loss is not None else float('nan'):.4f}\n"
        f"checkpoint saved to {out}", file=sys.stderr,
    )
    return 1 if failed else 0


def _steps_made(first: int, last: int) -> str:
    """'250 steps (2000 -> 2250)': the steps this run made, and from where when it resumed."""
    made = f"{last - first} step{'' if last - first == 1 else 's'}"
    return f"{made} ({first} -> {last})" if first else made


def _resumed_config(meta: dict, overrides: dict) -> TrainConfig:
    """The checkpoint's training settings with the command line's training overrides on top."""
    saved = meta.get("train_config")
    if not isinstance(saved, dict):
        raise ValueError("the checkpoint records no training settings; it cannot be resumed")
    model_fields = {field.name for field in dataclasses.fields(GPTConfig)}
    if set(overrides) & model_fields:
        raise ValueError(f"a resumed run keeps its model; drop {sorted(set(overrides) & model_fields)}")
    unknown = set(saved) - {field.name for field in dataclasses.fields(TrainConfig)}
    if unknown:
        raise ValueError(f"the checkpoint's training settings have unknown fields: {sorted(unknown)[:5]}")
    return TrainConfig(**{**saved, **overrides})


def _save(out: Path, trainer: Trainer, tokenizer: Tokenizer, meta: dict, val_loss: float | None) -> None:
    meta = {**meta, "step": trainer.step, "val_loss": val_loss}
    checkpoint.save(out, trainer.model, tokenizer, meta, trainer_state=trainer.state_dict())


# ---------------------------------------------------------------- sample


def sample(args: argparse.Namespace) -> int:
    if args.gpt2 or args.gguf:
        pretrained = load_gpt2(args.gpt2) if args.gpt2 else load_gguf(args.gguf)
        model, tokenizer = pretrained.model, pretrained.tokenizer
    else:
        model, tokenizer, _ = checkpoint.load(args.checkpoint)
    model.to(resolve_device(args.device))
    if args.prompt:
        prompt_ids = tokenizer.encode(args.prompt)
    else:  # GPT-2's start-of-text token, or a character model's first character (a newline in Shakespeare)
        prompt_ids = [getattr(tokenizer, "end_of_text", 0)]
    print(args.prompt, end="", flush=True)
    steps = stream(
        model, tokenizer, prompt_ids, args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, use_cache=not args.no_cache,
    )
    for step in steps:
        print(step.text, end="", flush=True)
    print()
    return 0


# ---------------------------------------------------------------- export


def export(args: argparse.Namespace) -> int:
    model, tokenizer, meta = checkpoint.load(args.checkpoint)
    if "history" not in meta:  # the command line keeps the loss curve in the training state, not in meta
        state = checkpoint.load_trainer_state(args.checkpoint, config=model.config)
        meta = {**meta, "history": state["history"] if state is not None else []}
    folder = to_transformers(model, tokenizer, meta, args.out, load_from=args.push_to_hub)
    print(f"{target(model.config).architecture} written to {folder}", file=sys.stderr)
    if args.push_to_hub:
        try:
            url = push_to_hub(folder, args.push_to_hub)
        # The Hub's refusals (HfHubHTTPError), a missing token, offline mode, no connection (httpx2's own
        # errors, which are not OSErrors): whatever it is, the folder is written and the message says why.
        except Exception as error:
            print(f"error: uploading {folder} to {args.push_to_hub} failed: {type(error).__name__}: {error}",
                  file=sys.stderr)
            return 1
        print(f"uploaded to {url}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- ladder


def ladder(args: argparse.Namespace) -> int:
    climb = Ladder.from_text(load_shakespeare(args.shakespeare), args.steps, args.seed,
                   stages=args.stages or tuple(RUNGS), device=args.device, schedule=SCHEDULES[args.schedule])
    if not args.json:
        print(f"{'stage':14} {'params':>8} {'val loss':>9} {'lecture':>8} {'seconds':>8}")
    interactive = sys.stderr.isatty()
    for event in climb.climb():
        if interactive and not event.rung:
            print(f"\r{event.stage}: step {event.event.step}/{args.steps}", end="", file=sys.stderr, flush=True)
        rung = event.rung
        if rung is None:
            continue
        if interactive:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps({"stage": rung.stage, "val_loss": round(rung.val_loss, 4), "params": rung.params,
                              "seconds": round(rung.seconds, 1)}), flush=True)
        else:
            lecture = RUNGS[rung.stage].lecture_loss
            print(f"{rung.stage:14} {rung.params:>8,} {rung.val_loss:>9.4f} "
                  f"{'-' if lecture is None else f'{lecture:.2f}':>8} {rung.seconds:>8.1f}", flush=True)
    return 0


def list_presets() -> int:
    for preset in PRESETS.values():
        print(f"{preset.name:22} {preset.title}\n{'':22} {preset.description}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return train(args)
        if args.command == "sample":
            return sample(args)
        if args.command == "export":
            return export(args)
        if args.command == "ladder":
            return ladder(args)
        return list_presets()
    # DataError, CheckpointError, bad settings, GPT-2 out of reach, options transformers lacks: a message
    except (ValueError, PretrainedUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
