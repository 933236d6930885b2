"""Bytes each rank sends per training step, for logs and the results tables."""
from __future__ import annotations

from typing import Iterable

import horovod.tensorflow as hvd

from horovod_q8.collective import policy
from horovod_q8.tensorflow.fused import DEFAULT_FUSION_BYTES


def bytes_per_step(shapes: Iterable[tuple], compression, ranks: int, fused: bool = True,
                   fusion_bytes: int = DEFAULT_FUSION_BYTES) -> float:
    """Bytes one rank sends to reduce gradients of these shapes once (`policy.bytes_per_step`
    with Horovod's own compressors named)."""
    from horovod_q8.tensorflow.compressor import Q8Compressor

    shapes = [tuple(int(d) for d in s) for s in shapes]
    if getattr(compression, "auto_state", None) is not None:  # Auto: each bucket as it chose
        groups = policy.plan_buckets(shapes, fusion_bytes, 4, compression.level_groups) if fused \
            else [[i] for i in range(len(shapes))]
        sizes = [sum(policy.numel(shapes[m]) for m in members) for members in groups]
        chosen = compression.for_step(sizes) if fused else [compression.compressors[compression.choose(n)] for n in sizes]
        return sum(bytes_per_step([(n,)], comp, ranks, fused, fusion_bytes) for n, comp in zip(sizes, chosen))
    if not isinstance(compression, Q8Compressor):
        compression = "fp16" if compression is hvd.Compression.fp16 else "none"
    return policy.bytes_per_step(list(shapes), compression, ranks, fused, fusion_bytes)
