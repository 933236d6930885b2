"""`Auto` for TensorFlow: `hvd.DistributedOptimizer(opt, compression=Auto)` or
`hvd.allreduce(t, compression=Auto)`; each bucket (or tensor) goes as the allowed format the
cost model predicts fastest on this cluster (`collective/auto.py`).

Calibration runs eagerly at first use (also while a step is traced), on every rank at the same
point: Horovod's own allreduce and allgather timed, the codec timed, figures exchanged.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Dict, Sequence

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective import policy
from horovod_q8.collective.auto import (DEFAULT_ALLOW, FUSED_PARTS, AutoCompressorBase, AutoPlan, Probe, make_auto,
                                        probe_values)
from horovod_q8.tensorflow.compressor import AGREEMENTS, _gather, agree, compressor, horovod_plain
from horovod_q8.tensorflow.transport import gather_bytes

_LOG = logging.getLogger("horovod_q8")
_PROBES = itertools.count(1)


def probe(compressors: Dict[str, Any]) -> Probe:
    """Horovod's collectives as TensorFlow runs them, eagerly; send() is `hvd.allreduce` with
    the compressor Auto would use (random normal values: a codec's time depends on them).
    Steps run the compressed path traced, so only Horovod's own paths are sent at SMALL
    (`Probe.traced`)."""
    k = next(_PROBES)
    compressors = {"none": hvd.Compression.none, **compressors}  # the link is timed as none, allowed or not
    cache: Dict[Any, tf.Tensor] = {}

    def values(n: int, dtype) -> tf.Tensor:
        if (n, dtype) not in cache:
            x = probe_values(n)
            cache[(n, dtype)] = tf.constant(x.view(np.uint8)[:n] if dtype == tf.uint8 else x)
        return cache[(n, dtype)]

    def first(t: tf.Tensor) -> None:
        # one element read back, as a step reads its result: copying all of it into NumPy is
        # no part of the allreduce (6-20 ms for 64 MiB here, bench/common.readback)
        tf.reshape(t, [-1])[:1].numpy()

    def send(name: str, n: int) -> None:
        # eagerly: tracing the compressed path as a tf.function costs seconds, calibration must not
        first(hvd.allreduce(values(n, tf.float32), op=hvd.Average, compression=compressors[name],
                            name=f"horovod_q8.auto.{k}.{name}.{n}"))

    def send_fused(name: str, n: int) -> None:
        # as the fused reducer sends a bucket of none or fp16 tensors: one grouped allreduce
        part = values(n // FUSED_PARTS, tf.float32)
        out = hvd.grouped_allreduce([part] * FUSED_PARTS, op=hvd.Average, compression=compressors[name],
                                    name=f"horovod_q8.auto.{k}.fused.{name}.{n}")
        first(out[-1])

    def allgather(nbytes: int) -> None:
        # as the engine gathers codes (transport.gather_bytes)
        first(gather_bytes(values(nbytes, tf.uint8), hvd.size(), f"horovod_q8.auto.{k}.allgather.{nbytes}"))

    gathers = itertools.count()

    def gather(obj):
        return hvd.allgather_object(obj, name=f"horovod_q8.auto.{k}.gather.{next(gathers)}")

    def fp16_roundtrip(n: int) -> None:
        first(tf.cast(tf.cast(values(n, tf.float32), tf.float16), tf.float32))

    return Probe(hvd.size(), send, allgather, gather, fp16_roundtrip, traced=True, send_fused=send_fused)


def _agree(statement: Any, label: str) -> None:
    AGREEMENTS.agree(_gather, hvd.rank(), statement, label)


def _log(line: str) -> None:
    if hvd.rank() == 0:
        _LOG.warning("%s", line)


# Plain Python, never converted by autograph when Horovod's allreduce calls it inside a traced
# function (converted, compress() once returned a Decision; plan() called ensure() without arguments).
_python = tf.autograph.experimental.do_not_convert


@dataclass(frozen=True, repr=False)
class AutoCompressor(AutoCompressorBase):
    """An `Auto` setting as a Horovod compressor. Equal settings share one plan (`auto_state`)."""

    def _compressors(self) -> dict:
        return {a: compressor(a) if a in ("none", "fp16") else compressor(a, min_size=self.min_size, **self.options_for(a))
                for a in self.allow}

    @_python
    def plan(self) -> AutoPlan:
        """Calibrate at first use (eagerly, every rank together), then the fixed plan."""
        if self.auto_state.plan is None:
            with tf.init_scope():
                self.auto_state.ensure(lambda: probe(self.compressors), _agree if hvd.size() > 1 else _alone, _log)
        return self.auto_state.plan

    @_python
    def choose(self, n: int) -> str:
        return self.plan().choose(n).name

    @_python
    def decision(self, tensor: tf.Tensor) -> policy.Decision:
        """Why a tensor outside the fused buckets goes as it goes (the log's reasons)."""
        n = policy.numel(tensor.shape) if tensor.shape.is_fully_defined() else None
        plain = int(policy.ring_bytes(n or 0, 4, hvd.size()))
        reason = ("not floating point" if not tensor.dtype.is_floating else
                  "size unknown until run time" if n is None else f"Auto chose {self.choose(n)}")
        return policy.Decision(False, n or 0, plain, plain, reason)

    @_python
    def compress(self, tensor):
        """Per tensor (Horovod's own reducer): the chosen compressor's compress."""
        if isinstance(tensor, tf.IndexedSlices):
            raise TypeError("horovod_q8 compresses dense gradients; pass sparse_as_dense=True")
        if hvd.size() > 1:
            agree(self, "compressor", once=True)  # where a fixed compressor states its setting
        if not tensor.dtype.is_floating or not tensor.shape.is_fully_defined() or hvd.size() < 2:
            comp = hvd.Compression.none
        else:
            comp = self.compressors[self.choose(policy.numel(tensor.shape))]
        wire, cast = horovod_plain(tensor) if comp is hvd.Compression.none else (tensor, None)
        out, ctx = comp.compress(wire)
        return out, (comp, ctx, cast)

    @_python
    def decompress(self, tensor, ctx):
        comp, inner, cast = ctx
        out = comp.decompress(tensor, inner)
        return out if cast is None else tf.cast(out, cast)

    @_python
    def for_step(self, sizes: Sequence[int], label: str = "") -> list:
        """The compressor chosen for each of a step's buckets of these sizes (Horovod's own for
        none and fp16); with a label, rank 0 logs the step's choices once per label and sizes."""
        return self.chosen_for_step(sizes, label, _log)


def _alone(statement: Any, label: str) -> None:
    del statement, label  # one rank agrees with itself


def auto(allow: Sequence[str] = DEFAULT_ALLOW, *, min_size: int = 1024, **options) -> AutoCompressor:
    """`compressor("auto", allow=...)`: options are those of the quantized formats it may pick."""
    a = make_auto(allow, min_size, **options)
    return AutoCompressor(a.allow, a.min_size, a.options)


__all__ = ["AutoCompressor", "auto"]
