"""The names compress() calls get. A compressor's compress(t) is not told t's name, and
horovod_q8's collectives need one identical on every rank: `horovod_api` (which wraps Horovod's
calls) queues the names of the tensors a call is about to compress, per thread, and the
compressor takes them in order. Below both, so neither imports the other for it."""
from __future__ import annotations

import threading
from typing import Callable, List, Optional

_local = threading.local()  # the names the next compress() calls in this thread get, in order


def next_name() -> Optional[str]:
    """The name of the tensor compress() is called for, or None when nobody said."""
    names: List[str] = getattr(_local, "names", [])
    return names.pop(0) if names else None


def with_names(names: List[Optional[str]], fn: Callable, *args, **kwargs):
    """fn(*args, **kwargs) with `names` queued for its compress() calls (none if any is None)."""
    old = getattr(_local, "names", [])
    _local.names = [n for n in names if n is not None] if all(n is not None for n in names) else []
    try:
        return fn(*args, **kwargs)
    finally:
        _local.names = old
