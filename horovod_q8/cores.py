"""The cores this process may run on, and its share of them."""
from __future__ import annotations

import os
from typing import List


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
