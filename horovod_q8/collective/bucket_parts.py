"""A bucket's tensors encoded where they lie, never concatenated into one flat copy.

The fused optimizer path sends a bucket of many gradients as one compressed sum. Concatenating
them first (`tf.concat`) wrote the whole bucket to memory again: on 2 emulated hosts on unshaped
links, ResNet-50's q8 step took 68 ms through the concatenation and 50 ms for its 8 buckets as
lone tensors (a scratch script, no log). Here a bucket is a *layout*: each member in a slot
that starts on a whole block (`unit`), padded with zeros to the next one, and the small members
packed into one slot of their own. A block never spans two members, so each member's whole
blocks are encoded from its own memory, straight into the bucket's buffer; only a member's last
block (its tail and the padding) goes through a small scratch buffer. The bytes are those of
encoding the padded concatenation (tests/test_bucket_parts.py), and the sum's slots come back as
views of the result (64-byte aligned: no copy in TensorFlow's split either).

Stochastic rounding (its random stream follows the element's index), one scale per tensor
(block_size 0), error feedback of codebook formats and CuPy arrays assemble the range instead.
"""
from __future__ import annotations

import bisect
import dataclasses
import threading
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from horovod_q8 import _compat, backends
from horovod_q8.formats import Format

ALIGN_ELEMENTS = 16  # a slot starts 64 bytes into the result at least: TensorFlow splits it without copying
EncodeFlat = Callable[[np.ndarray, Optional[np.ndarray], np.ndarray], np.ndarray]  # (x, residual, out) -> out

_SCRATCH = threading.local()  # host calls of different buckets may run at once


def unit(fmt: Format) -> int:
    """Elements a slot is a whole number of: whole blocks, whole bytes of codes, 64 bytes."""
    block = fmt.block_size if fmt.has_scales and fmt.block_size > 0 else 1
    return int(np.lcm(block, ALIGN_ELEMENTS))


def layout(sizes: Sequence[int], fmt: Format) -> Tuple[List[int], List[int], List[int]]:
    """(members placed alone, in order; members packed together, in order; every slot's size,
    the packed slot last where there is one) for members of these sizes. Members smaller than
    a unit are packed, so that padding stays below a unit per slot."""
    u = unit(fmt)
    alone = [k for k, n in enumerate(sizes) if n >= u]
    packed = [k for k, n in enumerate(sizes) if 0 < n < u]
    slots = [-(-sizes[k] // u) * u for k in alone]
    small = sum(sizes[k] for k in packed)
    if small:
        slots.append(-(-small // u) * u)
    return alone, packed, slots


def in_slots(members: Sequence, fmt: Format, concat: Callable[[list], object]) -> "Parts":
    """A bucket's 1-D members (arrays or a frontend's tensors) in `layout`'s slots: the small
    ones joined by `concat`, the frontend's concatenation."""
    alone, packed, slots = layout([int(np.prod(m.shape)) for m in members], fmt)
    arrays = [members[k] for k in alone] + ([concat([members[k] for k in packed])] if packed else [])
    return Parts(arrays, slots)


def slotted_request(req, sizes: Sequence[int]):
    """The engine request for a bucket of members of these sizes read in place (its n the
    padded size of their slots), or None where that padded size would go as more than one
    piece (`pipeline_elements`): pieces split one concatenated range instead."""
    padded = dataclasses.replace(req, n=sum(layout(sizes, req.fmt)[2]))
    return padded if len(padded.piece_sizes()) == 1 else None


def member_starts(sizes: Sequence[int], fmt: Format) -> List[int]:
    """Where each member of these sizes starts in the padded concatenation `layout` makes."""
    alone, packed, slots = layout(sizes, fmt)
    starts = [0] * len(sizes)
    at = 0
    for k, slot in zip(alone, slots):
        starts[k], at = at, at + slot
    for k in packed:
        starts[k], at = at, at + sizes[k]
    return starts


class Parts:
    """The padded concatenation of 1-D arrays (NumPy, CuPy, or a frontend's tensors on their way
    to a host call), each at the start of its slot, zeros after it."""

    def __init__(self, arrays: Sequence, slots: Optional[Sequence[int]] = None) -> None:
        self.arrays = list(arrays)
        sizes = [int(np.prod(a.shape)) for a in self.arrays]
        self.slots = list(sizes if slots is None else slots)
        if len(self.slots) != len(sizes) or any(s < n for s, n in zip(self.slots, sizes)):
            raise ValueError(f"slots {self.slots} do not hold members of {sizes} elements")
        self.starts = [0]
        for s in self.slots:
            self.starts.append(self.starts[-1] + s)

    @property
    def size(self) -> int:
        return self.starts[-1]

    @property
    def on_gpu(self) -> bool:
        return any(_compat.is_cupy_array(a) for a in self.arrays)

    def copy_to(self, s: int, e: int, out) -> None:
        """out[:e - s] = flat[s:e] (zeros in the padding)."""
        k = bisect.bisect_right(self.starts, s) - 1
        at = 0
        while s < e:
            a, a0, end = self.arrays[k], self.starts[k], min(e, self.starts[k + 1])
            real = max(0, min(end, a0 + a.size) - s)
            out[at: at + real] = a[s - a0: s - a0 + real]
            out[at + real: at + end - s] = 0
            at, s, k = at + end - s, end, k + 1

    def flat(self, s: int, e: int):
        """flat[s:e] as one new array."""
        xp = _compat.cupy() if self.on_gpu else np
        out = xp.empty(e - s, dtype=xp.float32)
        self.copy_to(s, e, out)
        return out


def in_place(parts: Parts, fmt: Format, error_feedback: bool, start: int) -> bool:
    """Whether flat[start:] encodes member by member here, with the bytes of its concatenation."""
    if parts.on_gpu or fmt.rounding != "nearest":
        return False
    if fmt.has_scales and (fmt.block_size <= 0 or fmt.block_size * fmt.bits % 8 or error_feedback):
        return False
    if start % _direct_step(fmt):
        return False
    return hasattr(backends.for_array(parts.arrays[0] if parts.arrays else np.empty(0)), "encode_into")


def _scratch(size: int) -> np.ndarray:
    buf = getattr(_SCRATCH, "x", None)
    if buf is None or buf.size < size:
        buf = np.empty(size, dtype=np.float32)
        _SCRATCH.x = buf
    return buf[:size]


def _direct_step(fmt: Format) -> int:
    """A direct run's length is a whole number of these: blocks, or bytes of codes."""
    return fmt.block_size if fmt.has_scales else 8


def encode(parts: Parts, s: int, e: int, fmt: Format, residual, out, encode_flat: EncodeFlat,
           error_feedback: bool = False):
    """out (fmt's layout for e - s elements: scales, then codes) = the encoding of flat[s:e];
    encode_flat(x, residual, out) encodes one array (and updates the residual) where the
    members cannot be read in place."""
    n = e - s
    if n == 0 or not in_place(parts, fmt, error_feedback, s):
        return encode_flat(parts.flat(s, e), residual, out)
    if out is None:
        out = np.empty(fmt.nbytes(n), dtype=np.uint8)
    be = backends.for_array(parts.arrays[0])
    scales_end, step = 4 * fmt.n_blocks(n), _direct_step(fmt)

    def run(x, a: int) -> None:  # x: flat[s + a : s + a + x.size], whole blocks from a
        b = 4 * (a // fmt.block_size) if fmt.has_scales else 0
        m = x.size
        codes_at = scales_end + a * fmt.bits // 8
        be.encode_into(x, fmt, out[b: b + 4 * fmt.n_blocks(m)].view(np.uint32),
                       out[codes_at: codes_at + -(-m * fmt.bits // 8)],
                       residual[a: a + m] if fmt.uses_residual and residual is not None else None)

    k = bisect.bisect_right(parts.starts, s) - 1
    pos = s
    while pos < e:
        arr, a0, slot_end = parts.arrays[k], parts.starts[k], min(e, parts.starts[k + 1])
        real_end = min(slot_end, a0 + arr.size)
        direct_end = pos + max(0, real_end - pos) // step * step
        if direct_end > pos:
            run(arr[pos - a0: direct_end - a0], pos - s)
        if slot_end > direct_end:  # the member's last block: its tail, then zeros
            x = _scratch(slot_end - direct_end)
            parts.copy_to(direct_end, slot_end, x)
            run(x, direct_end - s)
        pos, k = slot_end, k + 1
    return out
