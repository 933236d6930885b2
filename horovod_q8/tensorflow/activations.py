"""Compressed collectives for activations (model parallelism), with compressed gradients.

Three differentiable ops; each sends its forward activations and its backward gradients in
one format (`none` = float32, or a codebook format: q8, q8_linear, q8_mantissa,
q8_static_tree, q4), through `hvd.allgather` / `hvd.alltoall`, which move bytes without
adding them. Every rank decodes its own piece too, so all ranks see the same bits.

* `gather_rows(x)`: allgather along axis 0 (rows may differ per rank).
* `gather_units(x, sizes)`: allgather along the last axis (rank r holds sizes[r] units of
  the same rows).
* `to_row_owners(x, counts, sizes)`: alltoall; rank q receives rows counts[q] of every
  rank's units, i.e. its own rows of the full layer output.

Gradients follow Horovod's data-parallel convention: every rank differentiates its own loss
and the objective is their sum (or mean) over ranks. So the backward of an allgather is a
reduce-scatter: each rank gets the sum over ranks of the gradient slice of its own piece,
done as an alltoall of codes and a float32 sum in rank order (deterministic; codes are
never summed). The backward of `to_row_owners` is the reverse alltoall; no sum is needed.
Forward quantization is straight-through: the gradient passes it unchanged.
"""
from __future__ import annotations

from typing import Optional, Sequence

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective import pieces as P
from horovod_q8.tensorflow.bridge import host_call
from horovod_q8.tensorflow.compressed_sum import collective_name

_SENT = {"forward": 0, "backward": 0}


def bytes_sent() -> dict:
    """Bytes this process has put into activation collectives (own pieces excluded)."""
    return dict(_SENT)


def reset_bytes_sent() -> None:
    _SENT.update(forward=0, backward=0)


def _namer(x: tf.Tensor, name: Optional[str], kind: str):
    base = name or collective_name(x, f"q8act.{kind}.")
    return lambda s: None if base is None else f"{base}.{s}"


def _encode_whole(fmt, x: tf.Tensor, label: str) -> tf.Tensor:
    """x encoded as one piece; counts the allgather's bytes."""
    def enc(a):
        buf = P.encode(fmt, a)
        _SENT["forward"] += (hvd.size() - 1) * buf.size
        return buf
    (buf,) = host_call(enc, [x], [tf.uint8], [(None,)], label)
    return buf


def _encode_split(fmt, x: tf.Tensor, cuts, axis: int, direction: str, label: str):
    """x cut into pieces along axis at `cuts` (runtime int32 sizes or static list);
    returns (buffer, byte splits) for `hvd.alltoall` and counts its bytes."""
    rank = hvd.rank()

    def enc(a, sizes):
        parts = np.split(a, np.cumsum(sizes)[:-1], axis=axis)
        buf, splits = P.encode_pieces(fmt, parts)
        _SENT[direction] += int(splits.sum()) - int(splits[rank])
        return buf, splits
    sizes = tf.constant(cuts, tf.int32) if isinstance(cuts, (list, tuple)) else cuts
    return host_call(enc, [x, sizes], [tf.uint8, tf.int32], [(None,), (hvd.size(),)], label)


def _decode_concat(fmt, buf, lengths, shape, axis: int) -> np.ndarray:
    """Decode consecutive pieces shaped like `shape` but with `lengths[i]` along `axis`, and
    concatenate them along that axis."""
    dims = [int(d) for d in shape]
    ax = axis % len(dims)
    shapes = [tuple(dims[:ax] + [int(k)] + dims[ax + 1:]) for k in lengths]
    return np.concatenate(P.decode_pieces(fmt, buf, shapes), axis=axis)


def _reduce_scatter(fmt, dy, cuts, axis: int, v: tf.Tensor, shape: tf.Tensor, name):
    """The backward of an allgather: this rank's piece of dy summed over ranks (in rank order)."""
    buf, splits = _encode_split(fmt, tf.cast(dy, tf.float32), cuts, axis, "backward",
                                "q8act_encode_grad")
    received, _ = hvd.alltoall(buf, splits=splits, name=name)
    (dx,) = host_call(lambda r, shp: P.sum_pieces(fmt, r, shp, hvd.size()), [received, shape],
                      [tf.float32], [v.shape], "q8act_sum_grad")
    return dx


def gather_rows(x: tf.Tensor, compression="q8", name: Optional[str] = None):
    """(concat over ranks of x along axis 0, int32 rows per rank). Backward: reduce-scatter."""
    fmt = P.resolve(compression)
    x = tf.convert_to_tensor(x)
    dtype = x.dtype
    nm = _namer(x, name, "rows")
    counts = hvd.allgather(tf.shape(x, out_type=tf.int32)[:1], name=nm("counts"))

    @tf.custom_gradient
    def op(v):
        shape = tf.shape(v)
        gathered = hvd.allgather(_encode_whole(fmt, v, "q8act_encode"), name=nm("allgather"))
        (y,) = host_call(lambda g, c, shp: _decode_concat(fmt, g, c, shp, 0), [gathered, counts, shape],
                         [tf.float32], [(None, *v.shape[1:])], "q8act_decode")

        return y, lambda dy: _reduce_scatter(fmt, dy, counts, 0, v, shape, nm("reduce_scatter"))

    return tf.cast(op(tf.cast(x, tf.float32)), dtype), counts


def gather_units(x: tf.Tensor, sizes: Sequence[int], compression="q8",
                 name: Optional[str] = None) -> tf.Tensor:
    """Concat over ranks along the last axis; rank r holds sizes[r] units of the same rows.
    Backward: reduce-scatter of the units' gradient."""
    fmt = P.resolve(compression)
    x = tf.convert_to_tensor(x)
    sizes = [int(s) for s in sizes]
    dtype, rank, n = x.dtype, hvd.rank(), hvd.size()
    _check_sizes(x, sizes, rank, n)
    nm = _namer(x, name, "units")

    @tf.custom_gradient
    def op(v):
        shape = tf.shape(v)
        gathered = hvd.allgather(_encode_whole(fmt, v, "q8act_encode"), name=nm("allgather"))
        (y,) = host_call(lambda g, shp: _decode_concat(fmt, g, sizes, shp, -1), [gathered, shape],
                         [tf.float32], [(*v.shape[:-1], sum(sizes))], "q8act_decode")

        return y, lambda dy: _reduce_scatter(fmt, dy, sizes, -1, v, shape, nm("reduce_scatter"))

    return tf.cast(op(tf.cast(x, tf.float32)), dtype)


def to_row_owners(x: tf.Tensor, counts: tf.Tensor, sizes: Sequence[int], compression="q8",
                  name: Optional[str] = None) -> tf.Tensor:
    """Alltoall: x holds all rows (sum of `counts`) of this rank's sizes[rank] units; rank q
    receives its counts[q] rows of every rank's units, concatenated along the last axis.
    Backward: the reverse alltoall. `counts` as returned by `gather_rows`."""
    fmt = P.resolve(compression)
    x = tf.convert_to_tensor(x)
    sizes = [int(s) for s in sizes]
    dtype, rank, n = x.dtype, hvd.rank(), hvd.size()
    _check_sizes(x, sizes, rank, n)
    nm = _namer(x, name, "owners")

    @tf.custom_gradient
    def op(v):
        shape = tf.shape(v)
        buf, splits = _encode_split(fmt, v, counts, 0, "forward", "q8act_encode")
        received, _ = hvd.alltoall(buf, splits=splits, name=nm("alltoall"))

        def dec(r, c, shp):
            mine = [int(c[rank]), *[int(d) for d in shp[1:]]]  # my rows of every rank's units
            return _decode_concat(fmt, r, sizes, mine, -1)
        (y,) = host_call(dec, [received, counts, shape], [tf.float32],
                         [(None, *v.shape[1:-1], sum(sizes))], "q8act_decode")

        def grad(dy):
            buf, splits = _encode_split(fmt, tf.cast(dy, tf.float32), sizes, -1, "backward",
                                        "q8act_encode_grad")
            received, _ = hvd.alltoall(buf, splits=splits, name=nm("alltoall_grad"))
            (dx,) = host_call(lambda r, c, shp: _decode_concat(fmt, r, c, shp, 0),
                              [received, counts, shape], [tf.float32], [v.shape],
                              "q8act_decode_grad")
            return dx
        return y, grad

    return tf.cast(op(tf.cast(x, tf.float32)), dtype)


def _check_sizes(x: tf.Tensor, sizes: Sequence[int], rank: int, n: int) -> None:
    if len(sizes) != n:
        raise ValueError(f"sizes must list the units of each of the {n} ranks, got {list(sizes)}")
    if x.shape.rank is None or x.shape.rank < 1 or x.shape[-1] != sizes[rank]:
        raise ValueError(f"rank {rank} holds {sizes[rank]} units but x has shape {x.shape}")
