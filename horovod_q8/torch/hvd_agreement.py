"""horovod.torch ranks agree on their compression (`collective.agreement` over Horovod's
allgather_object): at each optimizer built (under elastic Horovod: at its first step of each
generation), at the first allreduce with each compression (again in each generation)."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Optional, Sequence

from horovod_q8.collective.agreement import Agreements, describe, timeout_s, watchdog
from horovod_q8.torch import generation

AGREEMENTS = Agreements()
generation.on_new(AGREEMENTS.reset)


def _gather(obj: Any, name: str) -> list:
    import horovod.torch as hvd
    return hvd.allgather_object(obj, name=name)


def statement(compression: Any, parameters: Optional[Sequence] = None, by_name: bool = False, **more: Any) -> dict:
    """What this rank will do: its compression and, for an optimizer, a digest of its parameters
    in order, or (by_name: Horovod's own optimizer, which matches gradients by name) by name
    (and `more`, plain JSON values: its buckets)."""
    out = {"compression": describe(compression), **more}
    if parameters is not None:
        listed = [[n, list(p.shape)] for n, p in parameters]
        digest = hashlib.sha256(json.dumps(sorted(listed) if by_name else listed).encode()).hexdigest()
        out["parameters"] = f"{len(parameters)} tensors, shapes and names {digest[:12]}"
    return out


def agree(mine: dict, label: str, once: bool = False) -> None:
    """Every rank states `mine` at `label` (the first time only, with once); differences raise
    ConfigMismatchError on every rank, a rank that never comes ends the job after the timeout."""
    import horovod.torch as hvd

    if hvd.size() < 2:
        return
    (AGREEMENTS.once if once else AGREEMENTS.agree)(_gather, hvd.rank(), mine, label)


def in_rank0_order(named: Sequence) -> list:
    """(name, parameter) pairs in rank 0's order where the ranks name the same parameters in
    other orders (Horovod's own optimizer matches them by name; the fused one buckets them in
    order), else as given (the agreement then names the difference). Every optimizer build
    calls it, fused or Horovod's own, so the builds' collectives line up whichever a rank runs;
    a rank that never comes is caught by the agreement's watchdog."""
    import horovod.torch as hvd

    names = [n for n, _ in named]
    label = AGREEMENTS.name("parameter_order")
    with watchdog(timeout_s(), hvd.rank(), f"the collective {label!r}"):
        theirs = _gather(names, label)[0]
    if theirs == names or sorted(theirs) != sorted(names):
        return list(named)
    where = {n: i for i, n in enumerate(theirs)}
    return sorted(named, key=lambda pair: where[pair[0]])


def is_global(process_set: Any) -> bool:
    import horovod.torch as hvd
    return process_set is None or process_set is hvd.global_process_set


def largest_steps(mine: Dict[str, int], label: str) -> Dict[str, int]:
    """Every key's largest step count over the ranks (one allgather; every rank calls it at the
    same point), so that a warm-up ends on the same step everywhere."""
    out: Dict[str, int] = {}
    for theirs in _gather(mine, AGREEMENTS.name(label)):
        for key, n in theirs.items():
            out[key] = max(out.get(key, 0), int(n))
    return out
