"""`AlignedPool`: host calls' buffers reused across steps, never while anything still views them."""
from __future__ import annotations

import numpy as np

from horovod_q8.collective.transport import ALIGN_BYTES, AlignedPool


def address(a: np.ndarray) -> int:
    return a.ctypes.data


def test_buffers_are_aligned_and_sized():
    pool = AlignedPool()
    for n, dtype in [(0, np.float32), (1, np.uint8), (1001, np.float32), (77, np.float64)]:
        a = pool(n, dtype)
        assert a.dtype == np.dtype(dtype) and a.size == n and a.flags.writeable
        assert n == 0 or address(a) % ALIGN_BYTES == 0  # an empty array has no data to align


def test_reused_only_once_every_view_is_gone():
    pool = AlignedPool()
    a = pool(1000, np.float32)
    first = address(a)
    b = pool(1000, np.float32)
    assert address(b) != first  # a is alive
    piece = a[10:20]  # a view keeps the memory's owner referenced
    del a
    c = pool(1000, np.float32)
    assert address(c) not in (first, address(b))
    del piece
    assert address(pool(1000, np.float32)) == first
    assert pool.held_bytes() == 3 * (4000 + ALIGN_BYTES)


def test_at_most_per_size_owners_are_kept():
    pool = AlignedPool(per_size=2)
    held = [pool(100, np.uint8) for _ in range(5)]  # all alive: 5 buffers, 2 kept
    assert len({address(a) for a in held}) == 5
    assert pool.held_bytes() == 2 * (100 + ALIGN_BYTES)


def test_unused_owners_of_other_sizes_go_beyond_max_bytes():
    pool = AlignedPool(max_bytes=10_000)
    a = pool(1000, np.float32)
    b = pool(1000, np.float32)
    del a
    c = pool(2000, np.float32)  # over the cap: a's unused owner goes, b's (in use) stays
    assert pool.held_bytes() == 4000 + 8000 + 2 * ALIGN_BYTES
    del b, c
    pool(3000, np.float32)
    assert pool.held_bytes() == 12000 + ALIGN_BYTES
