"""The fast path: gradients fused into buckets, one compressed allreduce per bucket.

Horovod fuses allreduce and allgather but not alltoall, and every compressed tensor costs
a few host calls; a model with hundreds of gradients should cost a few collectives per step.
"""
from __future__ import annotations

import contextlib
from typing import Callable, List, Optional

import horovod.tensorflow as hvd
import tensorflow as tf

from horovod_q8.formats import layer_group
from horovod_q8.tensorflow import collective as C
from horovod_q8.tensorflow.compressor import Q8Compressor, check_same_config

DEFAULT_FUSION_BYTES = 64 * 1024 * 1024
_GROUP_SHAPE = {"conv": (1, 1, 1, -1), "dense": (1, -1), "other": (-1,)}


def _check_op(op) -> None:
    if op not in (hvd.Average, hvd.Sum):
        raise ValueError("horovod_q8 supports op=hvd.Average and op=hvd.Sum; Adasum, Min, Max "
                         "and Product cannot be computed from quantized codes")


def bucket_shape(group: str, n: int) -> tuple:
    """A shape of n elements whose rank puts a fused bucket in its layer group."""
    return tuple(n if d == -1 else d for d in _GROUP_SHAPE[group])


def plan_buckets(shapes: List[tuple], fusion_bytes: int, by_group: bool) -> List[List[int]]:
    """Consecutive indices in buckets of at most fusion_bytes of float32 (a larger tensor gets
    its own bucket); with by_group, tensors of different layer groups never share one."""
    buckets: List[List[int]] = []
    current: List[int] = []
    size, group = 0, None
    for i, shape in enumerate(shapes):
        nbytes = 4 * C.numel(shape)
        g = layer_group(len(shape)) if by_group else None
        if current and (size + nbytes > fusion_bytes or g != group):
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
        group = g
    if current:
        buckets.append(current)
    return buckets


def make_fused_allreduce_grads_fn(name: str, compression: Q8Compressor, sparse_as_dense: bool,
                                  op, gradient_predivide_factor: float,
                                  fusion_bytes: int = DEFAULT_FUSION_BYTES) -> Callable:
    """allreduce_grads(grads, vars=None, use_generic_names=False), as Horovod's own."""
    _check_op(op)
    pre = 1.0 / gradient_predivide_factor if op == hvd.Average else 1.0
    post = gradient_predivide_factor if op == hvd.Average else 1.0
    by_group = bool(compression.format.level_groups)

    def allreduce_grads(grads, vars=None, use_generic_names=False):
        with tf.name_scope(name + "_Q8Allreduce"):
            grads = [tf.convert_to_tensor(g) if sparse_as_dense and isinstance(g, tf.IndexedSlices)
                     else g for g in grads]
            out: List[Optional[tf.Tensor]] = [None] * len(grads)
            fused = [i for i, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)
                     and g.dtype.is_floating and g.shape.is_fully_defined()]
            fused_set = set(fused)
            others = [i for i, g in enumerate(grads) if g is not None and i not in fused_set]
            for i in others:  # integer, sparse or unknown-shape gradients: Horovod's own path
                out[i] = hvd.allreduce(grads[i], op=op, prescale_factor=pre, postscale_factor=post,
                                       name=f"{name}.plain{i}")
            shapes = [tuple(grads[i].shape) for i in fused]
            n_ranks = hvd.size()
            scale = pre * post / (n_ranks if op == hvd.Average else 1)
            for b, members in enumerate(plan_buckets(shapes, fusion_bytes, by_group)):
                idx = [fused[m] for m in members]
                flat = tf.concat([C.as_flat_float32(grads[i]) for i in idx], axis=0)
                n = int(flat.shape[0])
                if n < max(compression.min_size, 1) or n_ranks == 1:
                    total = hvd.allreduce(flat, op=hvd.Sum, name=f"{name}.small{b}")
                else:
                    check_same_config(compression)
                    group = layer_group(len(shapes[members[0]])) if by_group else "other"
                    shape = bucket_shape(group, n)
                    total = C.compressed_sum(compression, flat, shape, f"q8.{name}.bucket{b}",
                                             compression.feedback, compression.schedule,
                                             compression.warmup_steps, compression.format.seed)
                parts = tf.split(total * scale, [C.numel(grads[i].shape) for i in idx])
                for i, part in zip(idx, parts):
                    out[i] = tf.cast(tf.reshape(part, grads[i].shape), grads[i].dtype)
            return out

    if tf.executing_eagerly():
        return tf.function(allreduce_grads)
    return allreduce_grads


@contextlib.contextmanager
def fused_allreduce(compression, fusion_bytes: int):
    """While constructing a Horovod optimizer or tape, make it use the fused function.

    Horovod's wrappers build their reducer with `hvd._make_allreduce_grads_fn`; everything
    else (backward_passes_per_step, local variables, broadcasts) stays Horovod's own.
    """
    if not isinstance(compression, Q8Compressor):
        yield  # none / fp16: Horovod's own path
        return
    original = hvd._make_allreduce_grads_fn

    def make(name, device_dense, device_sparse, _compression, sparse_as_dense, op,
             gradient_predivide_factor, groups, process_set=hvd.global_process_set):
        if process_set is not hvd.global_process_set:
            raise NotImplementedError("horovod_q8's fused path supports the global process set only")
        return make_fused_allreduce_grads_fn(name, compression, sparse_as_dense, op,
                                             gradient_predivide_factor, fusion_bytes)

    hvd._make_allreduce_grads_fn = make
    try:
        yield
    finally:
        hvd._make_allreduce_grads_fn = original


def DistributedGradientTape(gradtape, compression=None, fusion_bytes: int = DEFAULT_FUSION_BYTES,
                            **kwargs):
    """`hvd.DistributedGradientTape` with fused, compressed gradients (same arguments)."""
    compression = compression or hvd.Compression.none
    with fused_allreduce(compression, fusion_bytes):
        return hvd.DistributedGradientTape(gradtape, compression=compression, **kwargs)
