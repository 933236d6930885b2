"""The compressed allreduce as TensorFlow ops: kernels in host calls, bytes through
`hvd.alltoall` / `hvd.allgather`, never through a sum of codes."""
from __future__ import annotations

import itertools
import re
from typing import Optional

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective import plan as P
from horovod_q8.tensorflow.bridge import host_call

_STATE: dict = {}  # (owner, key, shape, dtype) -> tf.Variable, created once, reused on retrace
_EAGER_STEPS = itertools.count(1)


def collective_name(tensor: tf.Tensor, prefix: str) -> Optional[str]:
    """A name identical on every rank: from the graph tensor's name; None in eager mode."""
    if tf.executing_eagerly():
        return None
    return prefix + re.sub(r"[^A-Za-z0-9_.]", "_", tensor.name)


def state_variable(owner, key: str, shape, dtype) -> tf.Variable:
    """A non-trainable variable made once per (owner, key), outside any tf.function."""
    k = (owner, key, tuple(shape), dtype)
    if k not in _STATE:
        with tf.init_scope():
            _STATE[k] = tf.Variable(tf.zeros(shape, dtype), trainable=False,
                                    name="horovod_q8_state", synchronization=tf.VariableSynchronization.NONE)
    return _STATE[k]


def _step_and_seed(owner, name: Optional[str], base_seed: int) -> tuple:
    """This call's step number (1, 2, ...) and a stochastic-rounding seed that differs per
    step and per rank but is the same for every rank's view of a given step."""
    if name is None:
        step = tf.constant(next(_EAGER_STEPS), tf.int64)
    else:
        step = state_variable(owner, name + "/step", (), tf.int64).assign_add(1)
    seed = (tf.constant(base_seed, tf.int64) + step * 1000003 + hvd.rank() * 7919) % (2 ** 32)
    return step, seed


def _residual(owner, name: Optional[str], key: str, n: int, wanted: bool):
    if not wanted or name is None or n == 0:
        return None  # eager calls keep no state: error feedback needs tf.function
    return state_variable(owner, f"{name}/{key}", (n,), tf.float32)


def _with_state(fn, var):
    """Wrap a local step so the residual goes in as a copy and comes back as an output."""
    if var is None:
        return lambda x, seed: fn(x, None, seed)

    def wrapped(x, r, seed):
        r = r.copy()
        return fn(x, r, seed), r
    return wrapped


def _call(fn, x, var, seed, out_len: int, label: str):
    """Run a local step; update `var` from its second output when there is one."""
    if var is None:
        (out,) = host_call(_with_state(fn, None), [x, seed], [tf.uint8], [(out_len,)], label)
        return out
    out, new_r = host_call(_with_state(fn, var), [x, var.read_value(), seed], [tf.uint8, tf.float32],
                           [(out_len,), var.shape], label)
    with tf.control_dependencies([var.assign(new_r)]):
        return tf.identity(out)


def compressed_sum(owner, flat: tf.Tensor, shape, name: Optional[str], error_feedback: bool,
                   schedule: str, warmup_steps: int, base_seed: int) -> tf.Tensor:
    """The float32 sum over all ranks of `flat`, sent quantized with `owner.format`.

    Every rank returns the same bits. name: collective name prefix (None in eager mode).
    With owner.pipeline_elements, the tensor goes as independent pieces: TensorFlow runs one
    piece's codec while Horovod's thread moves another's bytes.
    """
    n = int(flat.shape[0])
    sizes = P.pipeline_parts(n, getattr(owner, "pipeline_elements", 0), owner.format.block_size or 1)
    if len(sizes) == 1:
        return _compressed_sum(owner, flat, shape, name, error_feedback, schedule, warmup_steps, base_seed)
    lead = (1,) * max(len(shape) - 1, 0)  # same rank, same layer group as the whole tensor
    return tf.concat([
        _compressed_sum(owner, piece, lead + (m,), None if name is None else f"{name}.part{k}",
                        error_feedback, schedule, warmup_steps, base_seed + k)
        for k, (piece, m) in enumerate(zip(tf.split(flat, sizes), sizes))], axis=0)


def _compressed_sum(owner, flat: tf.Tensor, shape, name: Optional[str], error_feedback: bool,
                    schedule: str, warmup_steps: int, base_seed: int) -> tf.Tensor:
    n = int(flat.shape[0])
    plan = P.make_plan(owner.format, n, hvd.size(), hvd.rank(), schedule, tuple(shape))
    step, seed = _step_and_seed(owner, name, base_seed)
    nm = (lambda s: None) if name is None else (lambda s: f"{name}.{s}")

    def compressed():
        fb = error_feedback
        keep = fb or plan.fmt.uses_residual
        r1 = _residual(owner, name, "residual", n, keep)
        if plan.schedule == P.ALLGATHER:
            buf = _call(lambda x, rr, s: P.encode_whole(plan, x, rr, s, fb), flat, r1, seed,
                        plan.fmt.nbytes(n), "q8_encode")
            gathered = hvd.allgather(buf, name=nm("allgather"))
            (total,) = host_call(lambda g: P.sum_gathered(plan, g), [gathered], [tf.float32],
                                 [(n,)], "q8_sum")
            return total
        buf = _call(lambda x, rr, s: P.encode_chunks(plan, x, rr, s, fb), flat, r1, seed,
                    sum(plan.send_splits), "q8_encode_chunks")
        received, _ = hvd.alltoall(buf, splits=plan.send_splits, name=nm("alltoall"))
        mine_len = plan.chunk_len(plan.rank)
        r2 = _residual(owner, name, "server_residual", mine_len, keep)
        mine = _call(lambda x, rr, s: P.reduce_chunk(plan, x, rr, s, fb), received, r2, seed,
                     plan.fmt.nbytes(mine_len), "q8_reduce_chunk")
        gathered = hvd.allgather(mine, name=nm("allgather"))
        (total,) = host_call(lambda g: P.decode_gathered(plan, g), [gathered], [tf.float32],
                             [(n,)], "q8_decode")
        return total

    if warmup_steps <= 0:
        return compressed()
    return tf.cond(step <= warmup_steps,
                   lambda: hvd.allreduce(flat, op=hvd.Sum, name=nm("warmup")), compressed)


def bytes_sent_per_rank(fmt, n: int, shape=None, schedule: str = "auto") -> int:
    """Bytes one rank sends for an n-element tensor (for logs and benchmarks)."""
    return P.make_plan(fmt, n, hvd.size(), hvd.rank(), schedule, shape).bytes_sent()


def as_flat_float32(tensor: tf.Tensor) -> tf.Tensor:
    return tf.reshape(tf.cast(tensor, tf.float32), [-1])


def numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))
