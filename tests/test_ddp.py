"""Training on several processes: `torchrun --nproc_per_node=2 -m core train` on the CPU (gloo) takes
the steps one process takes on the same global batch, writes one checkpoint, and resumes on the same
curve; gradient accumulation in one process does the same. Two processes at most, a short run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from core.checkpoint import CONFIG_FILE, TRAINER_FILE, WEIGHTS_FILE, load, load_trainer_state
from support.app import REPO
from support.cli import call_cli

# The copy task counts the answers alone, a different number in each row: a micro-batch's loss must
# weigh by its share of the batch's counted targets for the curves to agree. A learning rate that
# moves the loss within 40 steps; float32, so that both runs compute alike on any CPU.
RUN = ["--preset", "repeat", "--dtype", "float32", "--batch-size", "8", "--learning-rate", "1e-2",
       "--eval-interval", "10", "--set", "warmup_iters=4", "--set", "lr_decay_iters=40", "--set", "eval_iters=3",
       "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2"]
TOLERANCE = dict(rel=1e-4, abs=1e-6)  # float sums in another order (micro-batches, processes), nothing more


def torchrun(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=2 -m core train ARGS`: two processes on this host, gloo,
    meeting on a port the OS picks."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}  # one thread each: 2 cores, 2 processes
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "core", "train", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def curve(folder: Path) -> list[tuple[float, float | None]]:
    return [(row["train_loss"], row["val_loss"]) for row in load_trainer_state(folder)["history"]]


def assert_same_curve(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for step, ((train, val), (train_expected, val_expected)) in enumerate(zip(got, expected), 1):
        assert train == pytest.approx(train_expected, **TOLERANCE), f"training loss at step {step}"
        assert (val is None) == (val_expected is None), f"evaluation at step {step}"
        assert val is None or val == pytest.approx(val_expected, **TOLERANCE), f"validation loss at step {step}"


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """40 steps in one process, one batch of 8 rows a step: the curve the others must follow."""
    out = tmp_path_factory.mktemp("whole") / "whole"
    result = call_cli("train", *RUN, "--max-iters", "40", "--threads", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_micro_batches_in_one_process_follow_the_whole_batch(whole, tmp_path):
    accumulated = call_cli("train", *RUN, "--max-iters", "40", "--threads", "1", "--set", "micro_batch_size=2",
                           "--out", str(tmp_path / "micro"))
    assert accumulated.returncode == 0, accumulated.stderr
    assert "DDP" not in accumulated.stderr  # a plain process says nothing of processes
    assert_same_curve(curve(tmp_path / "micro"), curve(whole))

    uneven = call_cli("train", *RUN, "--set", "micro_batch_size=3")
    assert uneven.returncode == 2 and "batch_size (8) must split evenly" in uneven.stderr


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="torch without gloo")
@pytest.mark.timeout(300)
def test_two_processes_follow_one_process_and_resume_on_its_curve(whole, tmp_path):
    # 2 processes x 2 micro-batches x 2 rows: the global batch of 8, with DDP's no_sync on the first
    first = torchrun(*RUN, "--max-iters", "20", "--set", "micro_batch_size=2", "--out", "ddp", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = first.stderr.splitlines()
    assert lines[0] == ("Training with DDP on 2 processes (gloo, cpu): each step's global batch of 8 rows is "
                        "2 x 2 micro-batch(es) (gradient accumulation) x 2 rows"), first.stderr
    assert lines[1].startswith("repeat: ")
    # process 0 alone reports and writes: each evaluation printed once, one checkpoint, nothing else
    assert [line.split("]")[1].split()[0] for line in lines if line.startswith("[")] == ["10/20", "20/20"]
    assert os.listdir(tmp_path) == ["ddp"]
    assert sorted(os.listdir(tmp_path / "ddp")) == sorted([CONFIG_FILE, WEIGHTS_FILE, TRAINER_FILE])
    assert_same_curve(curve(tmp_path / "ddp"), curve(whole)[:20])

    resumed = torchrun("--resume", "ddp", "--max-iters", "40", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming at step 20" in resumed.stderr and "20 steps (20 -> 40)" in resumed.stderr
    assert_same_curve(curve(tmp_path / "ddp"), curve(whole))
    # The same model: the same logits. (Not every weight: the attention's key bias has a gradient of
    # exactly 0, softmax ignores it, and AdamW turns rounding noise there into full-size steps.)
    (ddp_model, _, _), (whole_model, _, _) = load(tmp_path / "ddp"), load(whole)
    tokens = torch.randint(ddp_model.config.vocab_size, (4, ddp_model.config.block_size),
                           generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ddp_model(tokens)[0], whole_model(tokens)[0], rtol=1e-4, atol=1e-5)
