"""torch.distributed ranks agree on the DDP hook's setting through the process group's store.

A rank without the hook runs DDP's own allreduce, which the hook's collectives would never
meet: a collective cannot be the check. Each rank writes its statement to the store under a key
numbered per check, then waits for every rank's key, at most HOROVOD_Q8_CHECK_TIMEOUT_S; a rank
that never writes is named in the error, a different setting is a ConfigMismatchError.
"""
from __future__ import annotations

import datetime
import itertools
import json
import logging
from typing import Any, Optional

import torch.distributed as dist

from horovod_q8.collective.agreement import ConfigMismatchError, check_same, timeout_s, watchdog

_LOG = logging.getLogger("horovod_q8")
_CHECKS = itertools.count(1)


def _store() -> Optional[Any]:
    """The default process group's store (torch's private accessor, fenced), or None."""
    try:
        from torch.distributed.distributed_c10d import _get_default_store
        return _get_default_store()
    except Exception as e:  # noqa: BLE001 - any torch without it: fall back to a collective
        _LOG.debug("horovod_q8: no default store (%s)", e)
        return None


def _present(store, key: str) -> bool:
    """Whether `key` is set (Store.check is missing from some stores, PrefixStore in torch 2.0)."""
    try:
        store.wait([key], datetime.timedelta(milliseconds=50))
        return True
    except RuntimeError:
        return False


def _global_ranks(group) -> list:
    if group is None:
        return list(range(dist.get_world_size()))
    return list(dist.get_process_group_ranks(group))


def agree(mine: Any, group=None, label: str = "ddp_hook") -> None:
    """Every rank of `group` states `mine` here; see the module's docstring."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    if size < 2:
        return
    k = next(_CHECKS)
    seconds = timeout_s()
    store = _store()
    if store is None:
        everyone: list = [None] * size
        with watchdog(seconds, rank, f"horovod_q8's {label} check {k}"):
            dist.all_gather_object(everyone, mine, group=group)
        check_same(mine, everyone, rank)
        return
    ranks = _global_ranks(group)
    keys = [f"horovod_q8/agree/{label}/{k}/{'-'.join(map(str, ranks))}/{r}" for r in range(size)]
    store.set(keys[rank], json.dumps(mine))
    try:
        store.wait(keys, datetime.timedelta(seconds=seconds))
    except RuntimeError:  # the store's timeout (DistStoreError, a RuntimeError, in newer torch)
        missing = [ranks[r] for r, key in enumerate(keys) if not _present(store, key)]
        if not missing:
            raise
        raise ConfigMismatchError(
            f"horovod_q8: rank {ranks[rank]} waited {seconds:g} s for rank(s) {missing} at the {label} "
            f"check: they do not run horovod_q8's {label}, or not at this point (register the same hook "
            "with the same setting on every rank: model.register_comm_hook(Q8HookState(...), ddp_hook), and "
            "call its load_state_dict on every rank or on none; a rank far slower to start also ends here). "
            f"HOROVOD_Q8_CHECK_TIMEOUT_S changes the wait.") from None
    check_same(mine, [json.loads(store.get(key)) for key in keys], ranks[rank])
