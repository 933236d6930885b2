"""The compressed allreduce, framework-free: who sends which bytes, and the local steps.

Two schedules (docs/design.md):
- two_phase: split into N chunks; quantize; alltoall; each rank sums its chunk from every rank
  in float32 in rank order; re-quantize; allgather; everyone dequantizes the same bytes.
  Bytes sent per rank: 2 (N-1)/N * n * bits/8, as a ring allreduce.
- allgather: quantize once; allgather; everyone sums all N in rank order. (N-1) * n * bits/8.

The local steps below take NumPy or CuPy arrays; the framework glue (TensorFlow, mpi4py)
only moves their uint8 results through collectives that never add bytes together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from horovod_q8 import backends
from horovod_q8.collective import bucket_parts
from horovod_q8.collective.bucket_parts import Parts
from horovod_q8.formats import Format
from horovod_q8.options import SCHEDULES

TWO_PHASE, ALLGATHER = "two_phase", "allgather"
ALIGN = 8  # chunk boundaries on whole bytes for every packing


def choose_schedule(schedule: str, size: int) -> str:
    """auto: allgather for N <= 2 (as few bytes, one quantization less), else two-phase."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule != "auto":
        return schedule
    return ALLGATHER if size <= 2 else TWO_PHASE


@dataclass(frozen=True)
class Plan:
    """Static facts of one compressed allreduce: identical on every rank except `rank`."""

    fmt: Format
    n: int
    size: int
    rank: int
    schedule: str

    @property
    def chunk(self) -> int:
        """Elements per rank's chunk: whole bytes, and whole blocks (a bucket's members then
        encode in place, bucket_parts)."""
        c = -(-self.n // self.size)
        align = int(np.lcm(ALIGN, self.fmt.block_size)) if self.fmt.has_scales and self.fmt.block_size > 0 else ALIGN
        return -(-c // align) * align

    def bounds(self, r: int) -> tuple[int, int]:
        """[start, end) of rank r's chunk (may be empty)."""
        return min(r * self.chunk, self.n), min((r + 1) * self.chunk, self.n)

    def chunk_len(self, r: int) -> int:
        s, e = self.bounds(r)
        return e - s

    @property
    def send_splits(self) -> list[int]:
        """Bytes this rank sends to each rank in the alltoall (two-phase)."""
        return [self.fmt.nbytes(self.chunk_len(r)) for r in range(self.size)]

    @property
    def gathered_sizes(self) -> list[int]:
        """Bytes each rank contributes to the allgather."""
        if self.schedule == ALLGATHER:
            return [self.fmt.nbytes(self.n)] * self.size
        return self.send_splits

    def bytes_sent(self) -> int:
        """Bytes one rank puts on the wire (its own data excluded)."""
        if self.schedule == ALLGATHER:
            return (self.size - 1) * self.fmt.nbytes(self.n)
        mine = self.chunk_len(self.rank)
        alltoall = sum(self.send_splits) - self.fmt.nbytes(mine)
        return alltoall + (self.size - 1) * self.fmt.nbytes(mine)


def _xp(a):
    if isinstance(a, Parts):
        return backends._compat.cupy() if a.on_gpu else np
    return backends._compat.cupy() if backends._compat.is_cupy_array(a) else np


def _encode(x, fmt: Format, residual, seed: int, error_feedback: bool, out=None):
    """Encode x (+ residual). Threshold formats update the residual in their kernel; codebook
    formats with error feedback keep what the codes did not carry."""
    be = backends.for_array(x)
    if fmt.uses_residual:
        return be.encode(x, fmt, residual=residual, seed=seed, out=out)
    if not error_feedback or residual is None:
        return be.encode(x, fmt, seed=seed, out=out)
    target = x + residual
    buf = be.encode(target, fmt, seed=seed, out=out)
    residual[...] = target - be.decode(buf, fmt, x.size)
    xp = _xp(x)
    residual[~xp.isfinite(residual)] = 0  # a NaN/Inf step must not poison every later step
    return buf


def _encode_range(flat, s: int, e: int, fmt: Format, residual, seed: int, error_feedback: bool, out):
    """_encode of flat[s:e] into out; flat is an array or a bucket's Parts, read in place."""
    if isinstance(flat, Parts):
        return bucket_parts.encode(flat, s, e, fmt, residual, out,
                                   lambda x, r, o: _encode(x, fmt, r, seed, error_feedback, out=o), error_feedback)
    return _encode(flat[s:e], fmt, residual, seed, error_feedback, out=out)


def encode_chunks(plan: Plan, flat, residual=None, seed: int = 0, error_feedback: bool = False,
                  out=None):
    """Step 1 of two-phase: one buffer holding every rank's chunk, quantized, in rank order.
    out: a uint8 buffer of sum(plan.send_splits) bytes to reuse (allocated when None)."""
    xp = _xp(flat)
    if out is None:
        out = xp.empty(sum(plan.send_splits), dtype=xp.uint8)
    offset = 0
    for r in range(plan.size):
        s, e = plan.bounds(r)
        nbytes = plan.send_splits[r]
        _encode_range(flat, s, e, plan.fmt, None if residual is None else residual[s:e],
                      seed + 7919 * r, error_feedback, out[offset: offset + nbytes])
        offset += nbytes
    return out


def sum_received(plan: Plan, received, n_chunk: int, out=None, scale: float = 1.0):
    """float32 sum of the N quantized copies of one chunk, added in rank order, times `scale`
    (into `out`, a float32 buffer of n_chunk elements to reuse, when given); one pass over
    the result where the backend fuses it."""
    xp = _xp(received)
    part = plan.fmt.nbytes(n_chunk)
    total = xp.empty(n_chunk, dtype=xp.float32) if out is None else out
    copies = [received[r * part: (r + 1) * part] for r in range(plan.size)]
    return backends.for_array(received).decode_sum(copies, plan.fmt, n_chunk, total, scale)


def reduce_chunk(plan: Plan, received, residual=None, seed: int = 0, error_feedback: bool = False,
                 work=None, out=None):
    """Step 2 of two-phase: sum my chunk from every rank, re-quantize it.

    Threshold formats quantize the mean (their levels are per-rank gradient sized) and the
    receiver multiplies by N again; the residual here is this rank's server-side one.
    work (float32, my chunk's length) and out (uint8, its encoded size): buffers to reuse.
    """
    n_chunk = plan.chunk_len(plan.rank)
    total = sum_received(plan, received, n_chunk, out=work)
    if plan.fmt.uses_residual:
        total /= plan.size
    return _encode(total, plan.fmt, residual, seed, error_feedback, out=out)


def decode_gathered(plan: Plan, gathered, out=None, scale: float = 1.0):
    """Step 3 of two-phase: every chunk's quantized sum, dequantized into the flat sum
    (into `out`, a float32 buffer of plan.n elements to reuse, when given), times `scale`
    (what the caller's op applies: 1/N for an average) in the same host call."""
    xp = _xp(gathered)
    be = backends.for_array(gathered)
    if out is None:
        out = xp.empty(plan.n, dtype=xp.float32)
    fused = 1.0 if plan.fmt.uses_residual else scale  # threshold formats scale by N first
    offset = 0
    for r in range(plan.size):
        s, e = plan.bounds(r)
        nbytes = plan.gathered_sizes[r]
        be.decode(gathered[offset: offset + nbytes], plan.fmt, e - s, out=out[s:e], scale=fused)
        offset += nbytes
    if not plan.fmt.uses_residual:
        return out
    out *= plan.size
    return _scaled(out, scale)


def _scaled(out, scale: float):
    if scale != 1.0:
        out *= _xp(out).float32(scale)
    return out


def encode_whole(plan: Plan, flat, residual=None, seed: int = 0, error_feedback: bool = False,
                 out=None):
    """Allgather schedule, step 1: the whole tensor quantized once (into `out` when given)."""
    return _encode_range(flat, 0, plan.n, plan.fmt, residual, seed, error_feedback, out)


def sum_gathered(plan: Plan, gathered, out=None, scale: float = 1.0):
    """Allgather schedule, step 2: dequantize every rank's copy and add them in rank order
    (times `scale`, as decode_gathered)."""
    return sum_received(plan, gathered, plan.n, out=out, scale=scale)


def make_plan(fmt: Format, n: int, size: int, rank: int, schedule: str = "auto",
              shape: Optional[tuple] = None) -> Plan:
    """The plan for an n-element tensor (shape picks a q4_threshold group)."""
    return Plan(fmt.for_shape(shape if shape is not None else (n,)), int(n), int(size), int(rank),
                choose_schedule(schedule, size))


def pipeline_parts(n: int, part: int, block: int) -> List[int]:
    """Sizes of the pieces a tensor of n elements is cut into: `part` rounded up to whole
    blocks, the rest last; one piece when part is 0 or n is not larger."""
    if part <= 0 or n <= part:
        return [n]
    step = -(-part // block) * block
    return [step] * (n // step) + ([n % step] if n % step else [])
