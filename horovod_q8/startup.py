"""Start-up checks that catch the usual launch mistakes before any training starts."""
from __future__ import annotations

import os
from typing import Mapping, Optional

from horovod_q8.errors import UserError

# Who started this process, most specific first: horovodrun's Gloo workers (HOROVOD_SIZE, as
# Horovod reads it), MPI, then an srun job step. Not SLURM_NTASKS: it is the allocation's
# count, inherited by everything started inside it (horovodrun or mpirun in an sbatch script).
LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")


class WorldSizeMismatch(UserError):
    """The launcher started N processes but Horovod sees another size."""


def launcher_world_size(env: Mapping[str, str] = os.environ) -> Optional[tuple]:
    """(variable, N) for the first launcher variable that says how many processes it started."""
    for var in LAUNCHER_SIZE_VARS:
        value = env.get(var, "").strip()
        if value.isdigit():
            return var, int(value)
    return None


def check_world_size(horovod_size: int, env: Mapping[str, str] = os.environ) -> None:
    """Stop when the launcher started N processes but Horovod sees a different size."""
    said = launcher_world_size(env)
    if said is None or said[1] == horovod_size:
        return
    var, n = said
    raise WorldSizeMismatch(
        f"the launcher started {n} processes ({var}={n}) but Horovod sees {horovod_size}. "
        "Usual cause: srun without PMI support starts every task as a singleton; use "
        "`srun --mpi=pmix` (or pmi2), or mpirun/horovodrun inside the allocation. "
        "Also check that every process uses the same Horovod controller (Gloo or MPI).")


MALLOC_TUNABLES = "GLIBC_TUNABLES"
HUGE_PAGES = "glibc.malloc.hugetlb=1"


def malloc_huge_pages(tunables: str = "") -> str:
    """GLIBC_TUNABLES for the ranks: malloc's mapped chunks in transparent huge pages (glibc 2.35
    and later; older ones ignore it), added to the tunables given unless they set it already.
    Buffers above glibc's 32 MB mmap limit (the allgather of 2 ranks' q8 codes of 25.6M values)
    are mapped afresh on every use, in 4 KB pages where huge pages are `madvise` only: 12.6k
    page faults per op on a Zen 3 VM (docs/performance.md)."""
    if "glibc.malloc.hugetlb" in tunables:
        return tunables
    return f"{tunables}:{HUGE_PAGES}" if tunables else HUGE_PAGES
