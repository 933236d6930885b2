"""Compressors for Horovod's `compression=` argument.

Horovod calls compress(t) -> (t', ctx), allreduces t', then decompress(t'', ctx). Codes must
never be summed, so compress() runs the compressed collective itself and returns a tiny
control tensor [1, rank]. After Horovod reduces it, [0] is exactly the factor that op
(Sum/Average), prescale and postscale would have applied, times N; [1]/[0] tells whether
the op was a sum or an average ((N-1)/2) or something we cannot honour (Min, Max, Product,
Adasum), which then stops with a clear error.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Optional

import horovod.tensorflow as hvd
import tensorflow as tf

from horovod_q8 import formats
from horovod_q8.collective.plan import SCHEDULES
from horovod_q8.tensorflow import collective as C

_CHECKED: set = set()


class ConfigMismatchError(ValueError):
    """Ranks were started with different compression settings."""

    ag_pass_through = True  # raise as is from inside tf.function, not as a StagingError


@dataclass(frozen=True)
class Q8Compressor:
    """A horovod_q8 compression setting; hashable and the same on every rank.

    format: the data type (`horovod_q8.formats.get`). min_size: tensors with fewer elements
    go through Horovod uncompressed. error_feedback: keep what quantization dropped and add
    it next step (None: on for threshold formats). warmup_steps: first steps uncompressed.
    schedule: "auto", "two_phase" or "allgather". pipeline_elements: send a larger tensor as
    pieces of this many elements, so one piece's codec overlaps another's transfer (0: whole).
    """

    format: formats.Format
    min_size: int = 1024
    error_feedback: Optional[bool] = None
    warmup_steps: int = 0
    schedule: str = "auto"
    pipeline_elements: int = 0

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.min_size < 0 or self.warmup_steps < 0 or self.pipeline_elements < 0:
            raise ValueError("min_size, warmup_steps and pipeline_elements must be >= 0")

    @property
    def name(self) -> str:
        return self.format.name

    @property
    def feedback(self) -> bool:
        return self.format.uses_residual if self.error_feedback is None else self.error_feedback

    def fingerprint(self) -> dict:
        d = dataclasses.asdict(self)
        d["format"] = {k: list(v) if isinstance(v, tuple) else v
                       for k, v in dataclasses.asdict(self.format).items()}
        return json.loads(json.dumps(d))

    def compresses(self, tensor: tf.Tensor) -> bool:
        """Static decision, identical on every rank: dtype, size, shape and N only."""
        return (tensor.dtype.is_floating and tensor.shape.is_fully_defined()
                and C.numel(tensor.shape) >= max(self.min_size, 1) and hvd.size() > 1)

    def compress(self, tensor):
        """Run the compressed sum; return the control tensor for Horovod to reduce."""
        if isinstance(tensor, tf.IndexedSlices):
            raise TypeError("horovod_q8 compresses dense gradients; pass sparse_as_dense=True")
        if not self.compresses(tensor):
            return tensor, None
        check_same_config(self)
        total = C.compressed_sum(self, C.as_flat_float32(tensor), tensor.shape,
                                 C.collective_name(tensor, f"q8.{self.name}."), self.feedback,
                                 self.schedule, self.warmup_steps, self.format.seed)
        # Data-dependent (never NaN) so it is neither pruned nor folded, and runs after the sum.
        touch = 0.0 * tf.cast(tf.math.is_nan(total[0]), tf.float32)
        control = tf.stack([1.0 + touch, float(hvd.rank()) + touch])
        return control, (total, tensor.dtype, tensor.shape)

    def decompress(self, tensor, ctx):
        """Scale the exact compressed sum by the factor Horovod's op applied to [1, ...]."""
        if ctx is None:
            return tensor
        total, dtype, shape = ctx
        n_ranks = float(hvd.size())
        ratio = tensor[1] / tensor[0]
        check = tf.debugging.assert_near(
            ratio, tf.constant((n_ranks - 1) / 2, tf.float32), rtol=1e-3, atol=1e-3,
            message="horovod_q8 compression supports op=Sum and op=Average only "
                    "(Adasum, Min, Max and Product cannot be computed from quantized codes)")
        with tf.control_dependencies([check]):
            factor = tensor[0] / n_ranks
        return tf.reshape(tf.cast(total * factor, dtype), shape)

    def __repr__(self) -> str:
        return f"Q8Compressor({self.format.name})"


def check_same_config(comp: Q8Compressor) -> None:
    """Once per setting and process: every rank must use exactly the same settings."""
    if comp in _CHECKED:
        return
    mine = comp.fingerprint()
    with tf.init_scope():
        everyone = hvd.allgather_object(mine, name="horovod_q8.config_check")
    for rank, theirs in enumerate(everyone):
        if theirs != mine:
            diff = _difference(mine, theirs)
            raise ConfigMismatchError(
                f"horovod_q8: rank {hvd.rank()} and rank {rank} use different compression "
                f"settings: {diff}. Start every rank with the same --compression options.")
    _CHECKED.add(comp)


def _difference(a: dict, b: dict, prefix: str = "") -> str:
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            sub = _difference(va, vb, prefix + k + ".")
            if sub:
                out.append(sub)
        elif va != vb:
            out.append(f"{prefix}{k}={va!r} here vs {vb!r} there")
    return "; ".join(out)


def compressor(name: str = "q8", *, block_size: Optional[int] = None, rounding: Optional[str] = None,
               seed: Optional[int] = None, threshold: Optional[float] = None,
               levels: Optional[dict] = None, min_size: int = 1024,
               error_feedback: Optional[bool] = None, warmup_steps: int = 0,
               schedule: str = "auto", pipeline_elements: int = 0):
    """A compressor for `hvd.DistributedOptimizer(..., compression=...)`.

    "none" and "fp16" return Horovod's own compressors, so one flag covers every choice.
    """
    if name == "none":
        return hvd.Compression.none
    if name == "fp16":
        return hvd.Compression.fp16
    fmt = formats.get(name, block_size=block_size, rounding=rounding, seed=seed,
                      threshold=threshold, levels=levels)
    return Q8Compressor(fmt, min_size=min_size, error_feedback=error_feedback,
                        warmup_steps=warmup_steps, schedule=schedule,
                        pipeline_elements=pipeline_elements)

