"""The command line, run as users run it: a short training, then sampling from its checkpoint."""

import json

import torch

from core.checkpoint import load
from support.cli import TINY, call_cli, run_cli


def test_train_then_sample(tmp_path):
    out = tmp_path / "repeat"
    trained = run_cli("train", "--preset", "repeat", "--max-iters", "4", "--eval-interval", "2",
                      "--threads", "1", "--out", str(out), *TINY)
    assert trained.returncode == 0, trained.stderr
    assert "4/4" in trained.stderr and "4 steps in" in trained.stderr and "ms/iter" in trained.stderr
    model, tokenizer, meta = load(out)
    assert meta["preset"] == "repeat" and meta["step"] == 4 and meta["val_loss"] > 0
    assert model.config.n_layer == 1 and model.config.block_size == 16

    sampled = call_cli("sample", "--checkpoint", str(out), "--prompt", "abc|", "--max-new-tokens", "30",
                      "--seed", "1")
    assert sampled.returncode == 0, sampled.stderr
    assert sampled.stdout.startswith("abc|") and len(sampled.stdout) == len("abc|") + 30 + 1
    uncached = call_cli("sample", "--checkpoint", str(out), "--prompt", "abc|", "--max-new-tokens", "30",
                       "--seed", "1", "--no-cache")
    assert uncached.returncode == 0 and uncached.stdout == sampled.stdout  # same seed, same text


def test_help_reads_well():
    result = call_cli("--help")
    assert result.returncode == 0
    assert "train" in result.stdout and "sample" in result.stdout and "examples" in result.stdout
    train_help = call_cli("train", "--help")
    assert "shakespeare-char-cpu" in train_help.stdout and "--max-iters" in train_help.stdout


def test_mistakes_give_messages_not_tracebacks(tmp_path):
    bad_preset = call_cli("train", "--preset", "nope")
    assert bad_preset.returncode == 2 and "invalid choice" in bad_preset.stderr
    bad_setting = call_cli("train", "--preset", "repeat", "--set", "n_layer=two")
    assert bad_setting.returncode == 2 and "n_layer must be an integer" in bad_setting.stderr
    missing = call_cli("sample", "--checkpoint", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "error: no checkpoint" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_resume_goes_on_exactly_where_the_run_stopped(tmp_path):
    """4 steps, then --resume to 8, ends with the weights of one uninterrupted 8-step run (CPU)."""
    schedule = ["--set", "lr_decay_iters=8", "--eval-interval", "4", "--threads", "1", *TINY]
    whole = call_cli("train", "--preset", "repeat", "--max-iters", "8", "--out", str(tmp_path / "whole"), *schedule)
    assert whole.returncode == 0, whole.stderr
    first = call_cli("train", "--preset", "repeat", "--max-iters", "4", "--out", str(tmp_path / "split"), *schedule)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "split" / "trainer.safetensors").is_file()
    resumed = call_cli("train", "--resume", str(tmp_path / "split"), "--max-iters", "8", "--threads", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming at step 4" in resumed.stderr and "8/8" in resumed.stderr
    # the summary counts the steps this run made, not the checkpoint's total
    assert "4 steps (4 -> 8) in" in resumed.stderr and "8 steps" not in resumed.stderr

    (whole_model, _, whole_meta), (split_model, _, split_meta) = load(tmp_path / "whole"), load(tmp_path / "split")
    assert split_meta["step"] == 8 and split_meta["val_loss"] == whole_meta["val_loss"]
    for (name, a), b in zip(whole_model.state_dict().items(), split_model.state_dict().values()):
        assert torch.equal(a, b), name

    again = call_cli("train", "--resume", str(tmp_path / "split"))  # nothing left to train
    assert again.returncode == 2 and "already trained 8 of 8 steps" in again.stderr
    changed = call_cli("train", "--resume", str(tmp_path / "split"), "--max-iters", "9", "--set", "n_layer=2")
    assert changed.returncode == 2 and "keeps its model" in changed.stderr
    both = call_cli("train", "--resume", str(tmp_path / "split"), "--preset", "repeat")
    assert both.returncode == 2 and "not allowed with" in both.stderr

    config = tmp_path / "split" / "config.json"
    description = json.loads(config.read_text())
    description["meta"]["train_config"]["no_such_setting"] = 1  # a hand-edited or hostile checkpoint
    config.write_text(json.dumps(description))
    edited = call_cli("train", "--resume", str(tmp_path / "split"), "--max-iters", "9")
    assert edited.returncode == 2 and "unknown fields: ['no_such_setting']" in edited.stderr
    assert "Traceback" not in edited.stderr
