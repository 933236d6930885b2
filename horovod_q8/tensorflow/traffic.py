"""Bytes each rank sends per training step, for logs and the results tables."""
from __future__ import annotations

from typing import Iterable

import horovod.tensorflow as hvd
import numpy as np

from horovod_q8.collective.plan import make_plan
from horovod_q8.tensorflow.compressor import Q8Compressor
from horovod_q8.tensorflow.fused import DEFAULT_FUSION_BYTES, bucket_shape, plan_buckets
from horovod_q8.formats import layer_group


def ring_bytes(n: int, bytes_per_element: float, ranks: int) -> float:
    """A ring allreduce sends 2 (N-1)/N of the tensor per rank."""
    return 2 * (ranks - 1) / ranks * n * bytes_per_element if ranks > 1 else 0.0


def bytes_per_step(shapes: Iterable[tuple], compression, ranks: int, fused: bool = False,
                   fusion_bytes: int = DEFAULT_FUSION_BYTES) -> float:
    """Bytes one rank sends to reduce gradients of these shapes once (rank 0's plan)."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    if not isinstance(compression, Q8Compressor):
        per = 2 if compression is hvd.Compression.fp16 else 4
        return sum(ring_bytes(n, per, ranks) for n in sizes)
    if ranks < 2:
        return 0.0
    total = 0.0
    if fused:
        by_group = bool(compression.format.level_groups)
        for members in plan_buckets(shapes, fusion_bytes, by_group):
            n = sum(sizes[m] for m in members)
            group = layer_group(len(shapes[members[0]])) if by_group else "other"
            shape = bucket_shape(group, n)
            if n >= max(compression.min_size, 1):
                total += make_plan(compression.format, n, ranks, 0, compression.schedule, shape).bytes_sent()
            else:
                total += ring_bytes(n, 4, ranks)
        return total
    for shape, n in zip(shapes, sizes):
        if n >= max(compression.min_size, 1):
            total += make_plan(compression.format, n, ranks, 0, compression.schedule, shape).bytes_sent()
            total += ring_bytes(2, 4, ranks)  # the control tensor
        else:
            total += ring_bytes(n, 4, ranks)
    return total
