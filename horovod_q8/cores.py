"""The cores this process may run on, and its share of them."""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

# What launchers state as the processes of a job on this host: Horovod's own (horovodrun --gloo),
# Open MPI, MPICH and Intel MPI, torchrun, Slurm's srun (a plain number only: "2(x3)" is per node)
LOCAL_SIZE_VARS = ("HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE",
                   "SLURM_NTASKS_PER_NODE")
THREADS_ENV = "NUMBA_NUM_THREADS"  # the user's choice of codec threads, where set


def usable_cores() -> List[int]:
    """The cores this process may run on: a cpuset (Slurm, containers) or taskset may allow
    fewer than the machine has, and os.cpu_count() counts them all."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def share(processes: int) -> int:
    """Threads for one of `processes` processes that share these cores (at least 1)."""
    return max(1, len(usable_cores()) // max(1, processes))


def _positive(var: str) -> Optional[int]:
    """Environment variable `var` as a positive whole number, or None."""
    value = os.environ.get(var, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def local_processes() -> Tuple[int, str]:
    """(processes of this job on this host, the variable that says so) from the launcher's
    environment; (1, "") where none does."""
    for var in LOCAL_SIZE_VARS:
        count = _positive(var)
        if count is not None:
            return count, var
    return 1, ""


def codec_threads() -> Tuple[int, str]:
    """(threads the CPU codec runs on, why): NUMBA_NUM_THREADS where the user set it, else this
    process's share of its cores among the job's processes on this host. Ranks that share cores
    must not each run as many threads as there are cores: 2 ranks on 2 cores, Numba's q8 encode
    measured 0.20-2.27 G elements/s per rank with 2 threads each, half of those timings under
    0.6, against 0.60-1.27 on one thread each (`python scripts/codec_threads.py` under
    horovodrun -np 2, docs/runs/codec/2026-12-06-96cd36f)."""
    chosen = _positive(THREADS_ENV)
    if chosen is not None:
        return chosen, f"{THREADS_ENV}={chosen}"
    processes, var = local_processes()
    cores = len(usable_cores())
    if not var:
        return share(1), f"all {cores} usable cores (no launcher states other processes on this host)"
    return share(processes), f"{cores} usable cores shared by {processes} processes on this host ({var})"
