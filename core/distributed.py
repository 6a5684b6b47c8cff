"""Data-parallel training over several processes, as torchrun starts them: which process this is,
the device it trains on, and the process group that averages the gradients.

    torchrun --standalone --nproc_per_node=2 -m core train --preset shakespeare-char-cpu

    def train(processes: Processes) -> None:    # the trainer lives in here: gone when the block ends
        for event in Trainer(model, data, config, processes=processes).run():
            ...

    with joined("auto") as processes:          # Processes(rank, world_size, local_rank, backend)
        train(processes)

torchrun starts the same command once per process and tells each one its place through the
environment (RANK, LOCAL_RANK, WORLD_SIZE, and MASTER_ADDR / MASTER_PORT to meet the others).
`joined` reads it and joins the process group, NCCL between GPUs and gloo between CPUs; a process
that torchrun did not start (a plain `python -m core train`, the app) gets `SINGLE`, joins nothing
and trains as before. The training loop does the rest (core.train): the DistributedDataParallel
wrapper, each process's share of every batch (`Processes.share`), evaluation split between the
processes and summed (`Processes.sum`), dropout seeded differently in each (`seeded`).

Imports core.device only. Never imports the model, the training loop, gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from core.device import resolve_device

BACKENDS = {"cuda": "nccl", "cpu": "gloo"}  # by device type; DDP runs on nothing else (not on Apple MPS)


@dataclass(frozen=True)
class Processes:
    """This process's place among the processes that train one model together."""

    rank: int = 0  # 0 to world_size - 1; process 0 prints, logs and writes the checkpoints
    world_size: int = 1
    local_rank: int = 0  # its rank among this host's processes: which of the host's GPUs it takes
    backend: str | None = None  # "nccl" or "gloo" once joined; None: one process, no DDP

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def main(self) -> bool:
        """Whether this process is the one that speaks for all: prints, logs, saves."""
        return self.rank == 0

    def device(self, name: str) -> torch.device:
        """The device `name` ('auto', 'cpu', 'cuda', ...) means for this process: under DDP, CUDA is
        the GPU of its local rank, one GPU per process."""
        device = resolve_device(name)
        if not self.distributed or device.type != "cuda":
            return device
        if device.index is not None and self.world_size > 1:
            raise ValueError(f"each process takes the GPU of its local rank; ask for 'cuda' or 'auto', not {name!r}")
        if device.index is None and self.local_rank >= torch.cuda.device_count():
            raise ValueError(f"process {self.local_rank} of this host has no GPU: the host has "
                             f"{torch.cuda.device_count()}; start at most that many processes on it")
        return torch.device("cuda", self.local_rank if device.index is None else device.index)

    def share(self, batch_size: int, micro_batch_size: int = 0) -> tuple[slice, int]:
        """This process's rows of a global batch of `batch_size` rows, and how many of them go into
        each forward pass (`micro_batch_size`; 0: all at once); a ValueError where they do not divide."""
        rows, uneven = divmod(batch_size, self.world_size)
        micro_batch = micro_batch_size or rows
        if uneven or not rows or rows % micro_batch:
            raise ValueError(f"batch_size ({batch_size}) must split evenly into {self.world_size} process(es) "
                             f"x micro-batches of {micro_batch} rows")
        return slice(self.rank * rows, (self.rank + 1) * rows), micro_batch

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the processes, in place, the same in each (a single process's as it is)."""
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor


SINGLE = Processes()  # a process that torchrun did not start


@contextlib.contextmanager
def joined(device: str = "auto") -> Iterator[Processes]:
    """Join the process group torchrun set this process up for (its backend follows `device`) and
    leave it on the way out; yields SINGLE, joining nothing, where torchrun did not start it. Let go
    of the block's trainers (their DistributedDataParallel) before it ends: see the end."""
    if "RANK" not in os.environ:
        yield SINGLE
        return
    kind = resolve_device(device).type
    if kind not in BACKENDS:
        raise ValueError(f"DDP trains on GPUs (NCCL) or on CPUs (gloo), not on {kind}: ask for 'cpu'")
    processes = Processes(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]),
                          BACKENDS[kind])
    if kind == "cuda":
        torch.cuda.set_device(processes.device(device))  # NCCL talks from the current GPU
    dist.init_process_group(processes.backend)  # meets the others at MASTER_ADDR:MASTER_PORT
    try:
        yield processes
        # Gloo's worker threads take the GIL to let go of a collective's tensors: a barrier waits
        # without it, so that they are done with the last one before the group goes.
        dist.barrier()
    finally:
        # A DistributedDataParallel left over would destroy the group later from its C++ reducer, holding
        # the GIL while it waits for those threads: the process could hang at exit. So the caller lets go
        # of its trainer inside the block, and its garbage is collected before the group is destroyed.
        gc.collect()
        dist.destroy_process_group()


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Torch's CPU generator, and `device`'s if it is a GPU, forked for the block and seeded with `seed`
    (dropout on a GPU draws from the GPU's own generator)."""
    gpu = [device.index] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=gpu):
        torch.default_generator.manual_seed(seed)
        for index in gpu:
            torch.cuda.default_generators[index].manual_seed(seed)
        yield
