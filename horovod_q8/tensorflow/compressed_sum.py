"""The engine's compressed sum as TensorFlow ops: step counting, seeds and warm-up around
`collective.engine.compressed_sum` over Horovod."""
from __future__ import annotations

import itertools
import re
from typing import Optional

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective import engine
from horovod_q8.collective.bucket_parts import Parts
from horovod_q8.tensorflow.state import CompressionState
from horovod_q8.tensorflow.transport import HorovodTransport, PhaseOrder

_EAGER_STEPS = itertools.count(1)


def collective_name(tensor: tf.Tensor, prefix: str) -> Optional[str]:
    """A name identical on every rank: from the graph tensor's name; None in eager mode."""
    if tf.executing_eagerly():
        return None
    return prefix + re.sub(r"[^A-Za-z0-9_.]", "_", tensor.name)


def compressed_sum(state: Optional[CompressionState], req: engine.Request, flat: tf.Tensor,
                   named: bool, warmup_steps: int, base_seed: int, scale=None,
                   order: Optional[PhaseOrder] = None) -> tf.Tensor:
    """The float32 sum over all ranks of `flat` (a tensor, or a bucket's 1-D members in their
    slots, `Parts`, read in place) times `scale`, sent as `req` says; the same bits on every
    rank.

    state: the owner of residuals and step counters (None in eager mode: no state, so no
    error feedback). named: req.key names the collectives (False in eager mode). scale: a
    float or float32 scalar tensor applied inside the last host call (None: 1). order: the
    phase order of the reduction this sum belongs to; not used under warm-up, whose tf.cond
    branch is a graph of its own.
    """
    if state is None:
        step = tf.constant(next(_EAGER_STEPS), tf.int64)
    else:
        step = state.step(req.key).assign_add(1)
    rank = hvd.rank()

    def seed_of(k: int) -> tf.Tensor:
        # differs per step, piece and rank; the same for every rank's view of a given step
        return (tf.constant(base_seed + k, tf.int64) + step * 1000003 + rank * 7919) % (2 ** 32)

    scale_in = None if scale is None else tf.cast(scale, tf.float32)

    def compressed():
        t = HorovodTransport(named, order if warmup_steps <= 0 else None)
        return engine.compressed_sum(t, req, flat, state, seed_of, scale_in)

    def plain():
        whole = padded_concat(flat) if isinstance(flat, Parts) else flat
        total = hvd.allreduce(whole, op=hvd.Sum, name=f"{req.key}.warmup" if named else None)
        return total if scale_in is None else total * scale_in

    if warmup_steps <= 0:
        return compressed()
    return tf.cond(step <= warmup_steps, plain, compressed)


def as_flat_float32(tensor: tf.Tensor) -> tf.Tensor:
    return tf.reshape(tf.cast(tensor, tf.float32), [-1])


def padded_concat(parts: Parts) -> tf.Tensor:
    """The members in their slots as one tensor (zeros after each), as the compressed path sends them."""
    pieces = []
    for a, slot in zip(parts.arrays, parts.slots):
        pieces.append(a)
        pad = slot - int(np.prod(a.shape))
        if pad:
            pieces.append(tf.zeros([pad], tf.float32))
    return tf.concat(pieces, axis=0) if pieces else tf.zeros([0], tf.float32)
