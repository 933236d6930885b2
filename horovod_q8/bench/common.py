"""Timing and table helpers shared by the benchmarks."""
from __future__ import annotations

import os
import platform
import time
from typing import Callable, List, Sequence

import numpy as np


def timeit(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of fn() over `repeats` runs after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def machine() -> str:
    """One line naming the machine the numbers came from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def markdown(header: Sequence[str], rows: List[Sequence[object]]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def barrier_median(comm, fn: Callable[[], object], repeats: int = 5) -> float:
    """Median seconds of fn() over repeats, each between two barriers: the slowest rank's time."""
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t = time.perf_counter()
        fn()
        comm.Barrier()
        times.append(time.perf_counter() - t)
    return float(np.median(times))
