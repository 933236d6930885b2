"""The fast path: gradients fused into buckets, one compressed allreduce per bucket.

Horovod fuses allreduce and allgather but not alltoall, and every compressed tensor costs
a few host calls; a model with hundreds of gradients should cost a few collectives per step.
A `FusedReducer` is what Horovod's optimizer or tape calls as its `allreduce_grads`; it owns
the `CompressionState` of that optimizer (tracked, so checkpoints save it).
"""
from __future__ import annotations

import json
from typing import List, Optional

import horovod.tensorflow as hvd
import tensorflow as tf

from horovod_q8.collective import bucket_parts, policy
from horovod_q8.tensorflow import compressed_sum as C
from horovod_q8.tensorflow.compressor import (Q8Compressor, agree, check_op, check_same_config, horovod_plain,
                                             RefusedOption, refuse_scaled_thresholds, tell_uncompressed)
from horovod_q8.tensorflow.state import CompressionState
from horovod_q8.tensorflow.transport import PhaseOrder

DEFAULT_FUSION_BYTES = policy.DEFAULT_FUSION_BYTES


def _horovods_own(grads: list, idx: List[int], out: list, name: str, **kwargs) -> None:
    """out[i] = Horovod's own allreduce of grads[i] for i in idx (kwargs: its op, factors and
    compression), one grouped allreduce per dtype (it holds one), each gradient in its own dtype
    (float64 summed in float64, as Horovod sums it; bfloat16, which Horovod refuses, in float32)."""
    for dtype in sorted({grads[i].dtype.name for i in idx}):
        same = [i for i in idx if grads[i].dtype.name == dtype]
        wire = [horovod_plain(grads[i]) for i in same]
        for i, (_, cast), t in zip(same, wire, hvd.grouped_allreduce([w for w, _ in wire], name=f"{name}.{dtype}", **kwargs)):
            out[i] = t if cast is None else tf.cast(t, cast)


class FusedReducer(tf.Module):
    """allreduce_grads(grads, vars=None, use_generic_names=False), as Horovod's own, with
    gradients in buckets of up to fusion_bytes, each through one compressed sum.

    compression: a Q8Compressor, or an AutoCompressor: each bucket then goes as the format Auto
    chooses for its size (none and fp16: one Horovod grouped allreduce per bucket and dtype); its
    calibration is kept in `auto_calibration`, so the optimizer's checkpoint restores the same
    choices."""

    def __init__(self, name: str, compression, sparse_as_dense: bool, op,
                 gradient_predivide_factor: float, fusion_bytes: int = DEFAULT_FUSION_BYTES,
                 transient: bool = False) -> None:
        super().__init__(name="horovod_q8_reducer")
        check_op(op)
        if gradient_predivide_factor <= 0:
            raise RefusedOption(f"gradient_predivide_factor must be > 0, got {gradient_predivide_factor}")
        self.prefix = name
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.fusion_bytes = int(fusion_bytes)
        pre = 1.0 / gradient_predivide_factor if op == hvd.Average else 1.0
        post = gradient_predivide_factor if op == hvd.Average else 1.0
        self.pre, self.post = pre, post
        # A transient reducer (a tape's, rebuilt every step) finds its state by what it
        # differentiates, so the state outlives it and two models' tapes never share one.
        self.transient = transient
        self.generic_names = False  # use_generic_names of the last call, as Horovod takes it
        self.state = CompressionState()
        self.auto = getattr(compression, "auto_state", None) is not None  # an AutoCompressor
        self.auto_calibration = tf.Variable("", trainable=False, name="horovod_q8_auto_calibration") \
            if self.auto and not transient else None
        self._eager_fn = tf.function(self._reduce) if tf.executing_eagerly() else None

    def __call__(self, grads, vars=None, use_generic_names=False):
        if self.transient:
            self.state = shared_state(self.compression, self.prefix, vars)
        self.generic_names = use_generic_names
        if self._eager_fn is not None and tf.executing_eagerly():
            return self._eager_fn(grads)
        return self._reduce(grads)

    def _gradient_entries(self, grads) -> List[str]:
        """Each gradient as the ranks compare it: None, or Horovod's name for it (its position
        under use_generic_names, as Horovod's grad_<i>), dtype and shape."""
        out = []
        for i, g in enumerate(grads):
            if g is None:
                out.append("None")
                continue
            t = g.values if isinstance(g, tf.IndexedSlices) else g
            name = f"grad_{i}" if self.generic_names else getattr(t, "name", f"grad_{i}")
            kind = "sparse " if isinstance(g, tf.IndexedSlices) else ""
            out.append(f"{kind}{name} {t.dtype.name} {t.shape}")
        return out

    def _reduce(self, grads):
        op, pre, post, name = self.op, self.pre, self.post, self.prefix
        with tf.name_scope(name + "_Q8Allreduce"):
            grads = [tf.convert_to_tensor(g) if self.sparse_as_dense and isinstance(g, tf.IndexedSlices)
                     else g for g in grads]
            out: List[Optional[tf.Tensor]] = [None] * len(grads)
            fused = [i for i, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)
                     and g.dtype.is_floating and g.shape.is_fully_defined()]
            fused_set = set(fused)
            n_ranks = hvd.size()
            refuse_scaled_thresholds(self.compression)
            if n_ranks > 1:
                check_same_config(self.compression)
                self._auto_calibrated()
            for i, g in enumerate(grads):  # integer, sparse or unknown-shape gradients: Horovod's own path
                if g is None or i in fused_set:
                    continue
                if not isinstance(g, tf.IndexedSlices):
                    tell_uncompressed(g.name, self.compression.decision(g))
                out[i] = hvd.allreduce(g, op=op, prescale_factor=pre, postscale_factor=post,
                                       name=f"{name}.plain{i}")
            shapes = [tuple(grads[i].shape) for i in fused]
            scale = pre * post / (n_ranks if op == hvd.Average else 1)
            auto = self.auto
            by_group = self.compression.level_groups if auto else bool(self.compression.format.level_groups)
            buckets = policy.plan_buckets(shapes, self.fusion_bytes, 4, by_group)
            sizes = [sum(policy.numel(shapes[m]) for m in members) for members in buckets]
            if n_ranks > 1:
                agree(self.compression, "fused_buckets", once=True, **policy.plan_statement(self.fusion_bytes, sizes),
                      gradients=policy.gradients_statement(self._gradient_entries(grads)))
            chosen = self.compression.for_step(sizes, self.prefix) if auto and n_ranks > 1 \
                else [self.compression] * len(buckets)
            order = PhaseOrder()  # buckets in the same order on every rank, phases overlapping
            own = []  # (bucket, gradient indices, Horovod's compressor) where Auto chose none or fp16
            for b, (members, n, comp) in enumerate(zip(buckets, sizes, chosen)):
                idx = [fused[m] for m in members]
                if not isinstance(comp, Q8Compressor):
                    own.append((b, idx, comp))
                    continue
                group = policy.bucket_group(comp, shapes, members)
                decision = policy.decide(comp, True, n, n_ranks, group)
                if not decision.compress:
                    _horovods_own(grads, idx, out, f"{name}.small{b}", op=op, prescale_factor=pre,
                                  postscale_factor=post)
                    continue
                members_flat = [C.as_flat_float32(grads[i]) for i in idx]
                key = f"q8.{name}.{comp.name}.bucket{b}" if auto else f"q8.{name}.bucket{b}"
                sums = self._compressed_bucket(comp, members_flat, group, key, scale, order)
                for i, part in zip(idx, sums):
                    out[i] = tf.cast(tf.reshape(part, grads[i].shape), grads[i].dtype)
            # One grouped allreduce per bucket, as calibration times it (Probe.send_fused): tensor by
            # tensor, Horovod may negotiate a step's tensors in several cycles (the main job's CNN,
            # loopback: 8% fewer images/s, docs/auto.md)
            for b, idx, comp in own:
                _horovods_own(grads, idx, out, f"{name}.auto{b}", op=op, prescale_factor=pre,
                              postscale_factor=post, compression=comp)
            return out

    def _compressed_bucket(self, comp, members: List[tf.Tensor], group: str, key: str, scale, order) -> list:
        """Each member's share of the compressed sum of a bucket (1-D tensors, in order). The
        members go in their slots (bucket_parts: the encode reads them where they lie, the
        slots come back as aligned views of the sum); pieces split one concatenated tensor."""
        sizes = [policy.numel(m.shape) for m in members]
        req = policy.request(comp, sum(sizes), group, key)
        slotted = bucket_parts.slotted_request(req, sizes)
        if slotted is None:
            total = C.compressed_sum(self.state, req, tf.concat(members, axis=0), True, comp.warmup_steps,
                                     comp.format.seed, scale=scale, order=order)
            return tf.split(total, sizes)
        parts = bucket_parts.in_slots(members, req.fmt, lambda ts: tf.concat(ts, axis=0))
        total = C.compressed_sum(self.state, slotted, parts,
                                 True, comp.warmup_steps, comp.format.seed, scale=scale, order=order)
        alone, packed, slots = bucket_parts.layout(sizes, req.fmt)
        sums: List[tf.Tensor] = [tf.zeros([0], tf.float32)] * len(members)  # empty members stay so
        in_slots = tf.split(total, slots)
        for k, slot, room in zip(alone, in_slots, slots):
            sums[k] = slot if room == sizes[k] else slot[: sizes[k]]
        if packed:
            small = tf.split(in_slots[-1][: sum(sizes[k] for k in packed)], [sizes[k] for k in packed])
            for k, t in zip(packed, small):
                sums[k] = t
        return sums

    @tf.autograph.experimental.do_not_convert  # plain Python, run eagerly (init_scope) even while traced
    def _auto_calibrated(self) -> None:
        """Auto: a restored calibration is used; a new one is saved with the optimizer."""
        if not self.auto:
            return
        state = self.compression.auto_state
        with tf.init_scope():
            var = self.auto_calibration
            saved = var.numpy().decode() if var is not None else ""
            if saved and state.plan is None and state.loaded is None and not state.remeasure:
                state.load_state_dict(json.loads(saved))
            self.compression.plan()
            if var is not None:
                var.assign(json.dumps(state.state_dict()))


_SHARED: dict = {}  # (setting, name, sources) -> the state of reducers that cannot own one


def shared_state(compression: Q8Compressor, name: str, sources=None) -> CompressionState:
    """State for reducers rebuilt every step or trace (a gradient tape is made inside the
    training step): one per setting, reducer name and the variables differentiated, so it
    outlives the reducers and two models never share it."""
    key = None if sources is None else tuple(v.ref() for v in sources)
    return _SHARED.setdefault((compression, name, key), CompressionState())
