"""Activations as bytes, framework-free: encode pieces of a tensor, decode or sum them.

The compressed allgather / alltoall of activations (`horovod_q8.tensorflow.activations`)
moves these buffers through collectives that never add bytes. Each piece is encoded on its
own (its own block scales), so a receiver can decode any piece without the others. The
format None is uncompressed float32 (its bytes are the float32 bytes), so "none" takes the
same code path and is exact.

A piece with no negative value (a ReLU output) is sent in the unsigned variant of its
codebook (`codebooks.UNSIGNED_SUFFIX`: the sign bit becomes one more bit of precision, half
the error for the same bytes). The sign bit of its float32 block scales, which are never
negative otherwise, tells the receiver so.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence, Union

import numpy as np

from horovod_q8 import codec, formats
from horovod_q8.formats import CODEBOOK, Format
from horovod_q8.formats.codebooks import UNSIGNED_SUFFIX

UNCOMPRESSED = "none"


def resolve(fmt: Union[str, Format, None]) -> Optional[Format]:
    """The Format for a name; None for "none" (float32). Threshold formats are refused:
    their fixed levels and residuals are made for gradients, not for activations."""
    if fmt is None or fmt == UNCOMPRESSED:
        return None
    f = formats.get(fmt)
    if f.kind != CODEBOOK:
        raise ValueError(f"{f.name} is a threshold format with error feedback (gradients only); "
                         f"activations take none or a codebook format: "
                         f"{', '.join(n for n in formats.names() if formats.get(n).kind == CODEBOOK)}")
    return f


def label(fmt: Optional[Format]) -> str:
    return UNCOMPRESSED if fmt is None else fmt.name


def nbytes(fmt: Optional[Format], n: int) -> int:
    """Bytes of one encoded piece of n elements."""
    return 4 * int(n) if fmt is None else fmt.nbytes(int(n))


_SIGN = np.uint32(0x80000000)


def unsigned(fmt: Format) -> Format:
    """The same format with the unsigned variant of its codebook."""
    return replace(fmt, codebook=fmt.codebook + UNSIGNED_SUFFIX)


def _non_negative(flat: np.ndarray) -> bool:
    """Every value finite and >= 0 (NaN and Inf keep the signed path, which propagates them)."""
    return bool(flat.min() >= 0) and bool(np.isfinite(flat.max()))


def encode(fmt: Optional[Format], x) -> np.ndarray:
    """One piece (any shape) as a uint8 buffer of nbytes(fmt, x.size)."""
    flat = codec.as_float32(x)
    if fmt is None:
        return flat.view(np.uint8).copy()
    if flat.size == 0:
        return np.empty(0, np.uint8)
    if not _non_negative(flat):
        return codec.quantize(flat, fmt)
    buf = codec.quantize(flat, unsigned(fmt))
    buf[: 4 * fmt.n_blocks(flat.size)].view(np.uint32)[:] |= _SIGN
    return buf


def decode(fmt: Optional[Format], buf, shape, out=None, accumulate: bool = False):
    """float32 array of `shape` from one piece's buffer (added into `out` when accumulate)."""
    shape = tuple(int(d) for d in shape)
    if fmt is None:
        values = buf.view(np.float32).reshape(shape)
        if out is None:
            return values.copy()
        if accumulate:
            out += values
        else:
            out[...] = values
        return out
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.zeros(shape, np.float32) if out is None else out
    scale_bytes = 4 * fmt.n_blocks(n)
    if buf.size >= 4 and buf[:4].view(np.uint32)[0] & _SIGN:
        buf = buf.copy()  # our own copy: the received buffer may be read-only
        buf[:scale_bytes].view(np.uint32)[:] &= ~_SIGN
        fmt = unsigned(fmt)
    return codec.dequantize(buf, fmt, shape, out=out, accumulate=accumulate)


def encode_pieces(fmt: Optional[Format], pieces: Sequence) -> tuple:
    """(one buffer holding every piece in order, int32 byte count of each piece)."""
    bufs = [encode(fmt, p) for p in pieces]
    splits = np.array([b.size for b in bufs], np.int32)
    return (np.concatenate(bufs) if bufs else np.empty(0, np.uint8)), splits


def decode_pieces(fmt: Optional[Format], buf, shapes: Sequence[tuple]) -> list:
    """The pieces of a buffer of consecutive pieces of these shapes."""
    out, offset = [], 0
    for shape in shapes:
        size = nbytes(fmt, int(np.prod(shape, dtype=np.int64)))
        out.append(decode(fmt, buf[offset: offset + size], shape))
        offset += size
    if offset != buf.size:
        raise ValueError(f"{label(fmt)}: buffer has {buf.size} bytes, pieces of shapes {list(shapes)} "
                         f"take {offset}")
    return out


def sum_pieces(fmt: Optional[Format], buf, shape: tuple, count: int) -> np.ndarray:
    """float32 sum of `count` consecutive pieces of one shape, added in piece (rank) order."""
    shape = tuple(int(d) for d in shape)
    size = nbytes(fmt, int(np.prod(shape, dtype=np.int64)))
    if buf.size != count * size:
        raise ValueError(f"{label(fmt)}: {buf.size} bytes is not {count} pieces of shape {shape}")
    total = np.empty(shape, np.float32) if count else np.zeros(shape, np.float32)
    for r in range(count):  # the first piece overwrites, the others add (as plan.sum_received)
        decode(fmt, buf[r * size: (r + 1) * size], shape, out=total, accumulate=r > 0)
    return total


def split_sizes(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal sizes, the first total % parts one larger."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    base, extra = divmod(int(total), parts)
    return [base + (1 if r < extra else 0) for r in range(parts)]


def offsets(sizes: Sequence[int]) -> list[int]:
    """Start of each part: [0, s0, s0 + s1, ...] (one more entry than sizes)."""
    return [0, *np.cumsum(sizes, dtype=np.int64).tolist()]


def allgather_bytes(fmt: Optional[Format], elements: int, size: int) -> int:
    """Bytes one rank sends in an allgather of its `elements` (its own copy excluded)."""
    return (size - 1) * nbytes(fmt, elements)


def alltoall_bytes(fmt: Optional[Format], elements_to: Sequence[int], rank: int) -> int:
    """Bytes one rank sends in an alltoall of pieces of these sizes (its own piece excluded)."""
    return sum(nbytes(fmt, n) for r, n in enumerate(elements_to) if r != rank)


# Bytes one rank sends (forward, backward) in each activation collective, from static facts;
# counts: rows held by each rank, sizes: units held by each rank.

def gather_rows_bytes(fmt: Optional[Format], counts: Sequence[int], row_elements: int,
                      rank: int) -> tuple[int, int]:
    """Allgather of rows; backward: reduce-scatter (alltoall) of the rows' gradient."""
    fwd = allgather_bytes(fmt, counts[rank] * row_elements, len(counts))
    return fwd, alltoall_bytes(fmt, [c * row_elements for c in counts], rank)


def gather_units_bytes(fmt: Optional[Format], rows: int, sizes: Sequence[int],
                       rank: int) -> tuple[int, int]:
    """Allgather over units; backward: reduce-scatter (alltoall) of the units' gradient."""
    fwd = allgather_bytes(fmt, rows * sizes[rank], len(sizes))
    return fwd, alltoall_bytes(fmt, [rows * u for u in sizes], rank)


def to_row_owners_bytes(fmt: Optional[Format], counts: Sequence[int], sizes: Sequence[int],
                        rank: int) -> tuple[int, int]:
    """Alltoall: rank q gets its own rows of every rank's units; backward: the reverse."""
    fwd = alltoall_bytes(fmt, [c * sizes[rank] for c in counts], rank)
    return fwd, alltoall_bytes(fmt, [counts[rank] * u for u in sizes], rank)
