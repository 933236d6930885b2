"""Timing and table helpers shared by the benchmarks."""
from __future__ import annotations

import os
import platform
import time
from typing import Callable, Dict, List, Sequence, Tuple

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


def round_order(names: Sequence[str], r: int) -> List[str]:
    """The order of round r: a shuffle of the names seeded by r, so every rank runs the same
    order, and every name is as likely to run in any place and after any other name. In a fixed
    rotation every name always followed the same one, and Auto sending exactly q8's buckets
    measured from 11.5% faster to 8.9% slower than q8 by link (docs/runs/auto/2026-12-06-e81a5ab,
    ResNet-50 rows)."""
    return [names[i] for i in np.random.default_rng(r).permutation(len(names))]


def rounds(fns: Dict[str, Callable[[], object]], repeats: int) -> Dict[str, List[float]]:
    """Wall seconds of every fn in each of `repeats` rounds, each fn once per round after one
    warm-up call each, in `round_order`: a slow spell of a shared machine then hits every
    compression alike instead of whichever ran during it (fp16 alone measured 539 to 1069 ms
    for the same tensor in different runs here on 2026-12-02)."""
    names = list(fns)
    for name in names:
        fns[name]()
    times: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in round_order(names, r):
            t = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t)
    return times


def round_ratios(times: Dict[str, List[float]], base: str) -> Dict[str, Tuple[float, float, float]]:
    """name -> (median, min, max) over rounds of base's time / name's time in the same round."""
    if base not in times:
        return {}
    out = {}
    for name, ts in times.items():
        r = np.asarray(times[base]) / np.asarray(ts)
        out[name] = (float(np.median(r)), float(r.min()), float(r.max()))
    return out


READBACK = ("one", "all")


def label(name: str, pipeline_elements: int) -> str:
    """A table row's name: the compression, and its piece size when it is sent in pieces."""
    return f"{name}/p{pipeline_elements}" if pipeline_elements else name


def readback(result, mode: str = "one"):
    """Wait for a tf.function's result: "one" reads back one element of its last tensor (eager
    execution is synchronous, so the call has finished; the read keeps that true under async
    execution); "all" copies every tensor into NumPy, as `.numpy()` does: 10-30 ms for 100 MB
    on this VM, the same for every compression and no part of an allreduce."""
    import tensorflow as tf

    tensors = list(result) if isinstance(result, (list, tuple)) else [result]
    if mode == "all":
        return [t.numpy() for t in tensors]
    return tf.reshape(tensors[-1], [-1])[:1].numpy()


def machine() -> str:
    """One line naming the machine the numbers came from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def kernels() -> str:
    """The codec kernels this process runs (native AVX-512 / AVX2, or Numba)."""
    from horovod_q8.backends import native

    if native.library() is not None:
        return "native AVX-512"
    if native.library_avx2() is not None:
        return "native AVX2 (Numba for the rest)"
    return f"Numba (no native kernels: {native.describe()}; {numba_target()})"


def numba_target() -> str:
    """What LLVM compiles the Numba kernels for: the host CPU, or NUMBA_CPU_NAME/NUMBA_CPU_FEATURES."""
    try:
        import llvmlite.binding as ll
        from numba.core import config
    except ImportError:
        return "numba not installed: the NumPy reference runs"
    name = config.CPU_NAME or ll.get_host_cpu_name()
    if config.CPU_FEATURES is None:
        features = "the host's features"
    else:
        features = f"features {config.CPU_FEATURES!r}" if config.CPU_FEATURES else f"{name}'s own features"
    return f"LLVM code for {name}, {features}"


def number(v: float) -> str:
    """A figure as the tables print it: 3 significant digits, whole numbers from 1000."""
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def ratio_range(lo: float, hi: float) -> str:
    """A range of ratios, rounded as the median beside it (else a printed median of 0.647 could
    fall outside a range printed from 0.65)."""
    return f"{number(lo)}-{number(hi)}"


def markdown(header: Sequence[str], rows: List[Sequence[object]]) -> str:
    def fmt(v):
        return number(v) if isinstance(v, float) else str(v)
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
