"""What to compress, in which buckets, and how many bytes that puts on the wire.

Framework-free and decided from static facts only (dtype, size, N, the setting), so every
rank decides the same. Used by the TensorFlow reducers, the traffic figures, the speedup
model and the benchmarks alike.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from horovod_q8.collective import engine
from horovod_q8.collective.setting import Setting
from horovod_q8.formats import layer_group

# Bytes per element of the uncompressed baselines (Horovod's none and fp16).
BASELINE_BYTES = {"none": 4, "fp16": 2}
# horovod_q8's bucket size (Horovod's own fusion threshold is 128 MiB): small enough that a
# bucket's codec still runs while another's bytes move, large enough that a step has few
# collectives for ranks to wait on each other in. ResNet-50's step on 2 ranks took 10-29% less
# time than with 16 MiB buckets and no more on 4 (docs/performance.md, "Buckets of 16 MiB").
DEFAULT_FUSION_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Decision:
    """Whether a tensor (or bucket) of n elements goes compressed, and the bytes either way."""

    compress: bool
    n: int
    bytes_uncompressed: int
    bytes_compressed: int
    reason: str


def ring_bytes(n: int, bytes_per_element: float, ranks: int) -> float:
    """A ring allreduce sends 2 (N-1)/N of the tensor per rank."""
    return 2 * (ranks - 1) / ranks * n * bytes_per_element if ranks > 1 else 0.0


def decide(setting: Setting, is_float: bool, n: Optional[int], ranks: int,
           group: str = "other") -> Decision:
    """The decision for one tensor or bucket; n None = size known only at run time."""
    plain = int(ring_bytes(n or 0, 4, ranks))
    if not is_float:
        return Decision(False, n or 0, plain, plain, "not floating point")
    if n is None:
        return Decision(False, 0, 0, 0, "size unknown until run time")
    if ranks < 2:
        return Decision(False, n, 0, 0, "a single rank sends nothing")
    if n < max(setting.min_size, 1):
        return Decision(False, n, plain, plain, f"fewer than min_size={setting.min_size} elements")
    sent = engine.bytes_sent(request(setting, n, group), ranks)
    return Decision(True, n, plain, sent, "compressed")


def request(setting: Setting, n: int, group: str, key: str = "q8") -> engine.Request:
    """The engine request for n elements of a layer group under this setting."""
    return engine.Request(setting.format.for_group(group), int(n), setting.schedule, setting.feedback,
                          setting.pipeline_elements, key)


def plan_buckets(shapes: Sequence[tuple], fusion_bytes: int, bytes_per_element: float = 4,
                 by_group: bool = False) -> List[List[int]]:
    """Buckets of tensor indices in backprop order (the last tensor first, as gradients become
    ready), tensors up to fusion_bytes (a larger tensor travels alone), ordered by their first
    member. With by_group, tensors of different layer groups never share a bucket: each group
    fills a bucket of its own, so that layers whose groups alternate (a convolution, then its
    batch norm's vectors) do not cut the model into a bucket per tensor."""
    buckets: List[List[int]] = []
    open_: Dict[Optional[str], Tuple[List[int], float]] = {}  # by group: its bucket being filled
    for i in reversed(range(len(shapes))):
        nbytes = bytes_per_element * numel(shapes[i])
        g = layer_group(len(shapes[i])) if by_group else None
        current, size = open_.get(g, ([], 0.0))
        if current and size + nbytes > fusion_bytes:
            buckets.append(current)
            current, size = [], 0.0
        current.append(i)
        open_[g] = (current, size + nbytes)
    buckets += [current for current, _ in open_.values() if current]
    return sorted(buckets, key=lambda members: -members[0])


def plan_statement(fusion_bytes: int, bucket_elements: Sequence[int]) -> dict:
    """What ranks compare about a bucketed reducer before its first step: ranks whose buckets
    differ (another fusion_bytes, other tensors) would exchange codes of different lengths."""
    sizes = [int(n) for n in bucket_elements]
    digest = hashlib.sha256(json.dumps(sizes).encode()).hexdigest()[:12]
    return {"fusion_bytes": int(fusion_bytes), "buckets": f"{len(sizes)} of {sum(sizes)} elements in all ({digest})"}


def gradients_statement(entries: Sequence[str]) -> str:
    """What ranks compare about the gradients a bucketed reducer is handed, position by position
    (each entry: None, or its name as Horovod's own allreduce would send it, dtype and shape):
    ranks that list other variables, in another order, or with a gradient where another has
    None would otherwise sum unrelated gradients where Horovod's own allreduce waits forever."""
    entries = list(entries)
    digest = hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:12]
    missing = sum(e == "None" for e in entries)
    return f"{len(entries)} gradients, {missing} of them None ({digest})"


def bucket_group(setting: Setting, shapes: Sequence[tuple], members: Sequence[int]) -> str:
    """The layer group a bucket is quantized in (one group per bucket when the format has groups)."""
    return layer_group(len(shapes[members[0]])) if setting.format.level_groups else "other"


def bytes_per_step(shapes: Sequence[tuple], setting, ranks: int, fused: bool = True,
                   fusion_bytes: int = DEFAULT_FUSION_BYTES) -> float:
    """Bytes one rank sends to reduce gradients of these shapes once (rank 0's plan).

    setting: a Setting, or "none" / "fp16" for Horovod's own ring allreduce.
    fused: buckets as horovod_q8's reducer makes them; else one allreduce per tensor, each
    with its 2-float control tensor.
    """
    shapes = [tuple(int(d) for d in s) for s in shapes]
    if isinstance(setting, str):
        return sum(ring_bytes(numel(s), BASELINE_BYTES[setting], ranks) for s in shapes)
    if ranks < 2:
        return 0.0
    total = 0.0
    if fused:
        for members in plan_buckets(shapes, fusion_bytes, 4, bool(setting.format.level_groups)):
            n = sum(numel(shapes[m]) for m in members)
            total += decide(setting, True, n, ranks, bucket_group(setting, shapes, members)).bytes_compressed
        return total
    for s in shapes:
        d = decide(setting, True, numel(s), ranks, layer_group(len(s)))
        total += d.bytes_compressed + (ring_bytes(2, 4, ranks) if d.compress else 0)
    return total


def numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))
