"""The host's speed, printed beside every timing a benchmark reports (hosts differ: the same code ran
twice as slow on one 2-core machine as on another).

    from host import describe_host      # a bench script's folder is on its sys.path
    print(describe_host())               # "host: AMD EPYC ..., 2 cores, 74.1 GFLOP/s on one thread ..."
    cpu_seconds(pid)                     # and what a process has used of it, for figures less load-sensitive
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch


def host_speed() -> float:
    """GFLOP/s of a 512x512 float32 matrix product on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    a @ a
    start, runs = time.perf_counter(), 50
    for _ in range(runs):
        a @ a
    torch.set_num_threads(threads)
    return 2 * 512**3 * runs / (time.perf_counter() - start) / 1e9


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe_host() -> str:
    """One line: the CPU, its cores, its speed and the load average now."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"host: {cpu_name()}, {os.cpu_count()} cores, {host_speed():.1f} GFLOP/s on one thread "
            f"(512x512 float32 matmul); load average {load}; torch {torch.__version__}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process `pid` has used so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
