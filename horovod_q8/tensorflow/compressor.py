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
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import horovod.tensorflow as hvd
import tensorflow as tf

from horovod_q8 import formats
from horovod_q8.collective import policy
from horovod_q8.collective.auto import AutoCompressorBase
from horovod_q8.collective.agreement import Agreements, ConfigMismatchError, describe  # noqa: F401 (re-exported)
from horovod_q8.collective.setting import Setting, by_name
from horovod_q8.formats import layer_group
from horovod_q8.options import UNSUPPORTED_OP
from horovod_q8.tensorflow import compressed_sum as C
from horovod_q8.tensorflow.state import CompressionState

_TENSOR_STATES: dict = {}  # setting -> the per-tensor path's CompressionState
_LOG = logging.getLogger("horovod_q8")
_TOLD: set = set()
_OWNERS = itertools.count(1)


@dataclass(frozen=True)
class Q8Compressor(Setting):
    """A `Setting` as a Horovod compressor. `state` holds the residuals and step counters of
    the per-tensor path (`hvd.allreduce(t, compression=...)`), shared by equal settings;
    optimizers get their own state through their reducer. `fresh()` is the same setting with
    state of its own."""

    state: Any = field(default=None, compare=False, repr=False)
    # Compared and hashed: Horovod caches its per-tensor reducer on the compressor's value, so
    # a fresh() copy must not be equal to the setting it came from (0: the shared one).
    owner: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.state is None:
            # Equal settings share the per-tensor state, as they did before owners existed:
            # `tf.function(lambda x: hvd.allreduce(x, compression=compressor("q8")))` builds a
            # new compressor on each trace, and TF's second trace must find the same variables.
            object.__setattr__(self, "state", _TENSOR_STATES.setdefault(self, CompressionState(
                "horovod_q8_tensor_state")))

    def fresh(self) -> "Q8Compressor":
        """The same setting with per-tensor state of its own (and an identity of its own)."""
        return dataclasses.replace(self, state=CompressionState("horovod_q8_tensor_state"),
                                   owner=next(_OWNERS))

    def decision(self, tensor: tf.Tensor) -> policy.Decision:
        """Static decision, identical on every rank: dtype, size, shape and N only."""
        n = policy.numel(tensor.shape) if tensor.shape.is_fully_defined() else None
        return policy.decide(self, tensor.dtype.is_floating, n, hvd.size(),
                             layer_group(tensor.shape.rank or 1))

    def compresses(self, tensor: tf.Tensor) -> bool:
        return self.decision(tensor).compress

    def compress(self, tensor):
        """Check the settings; return the control tensor for Horovod to reduce. The compressed
        sum itself runs in decompress(), once the factor of Horovod's op is known, so that the
        last host call applies it (no extra pass over the result)."""
        if isinstance(tensor, tf.IndexedSlices):
            raise TypeError("horovod_q8 compresses dense gradients; pass sparse_as_dense=True")
        if hvd.size() > 1:
            check_same_config(self)  # every rank, whatever it decides for this tensor
        decision = self.decision(tensor)
        if not decision.compress:
            tell_uncompressed(tensor.name if not tf.executing_eagerly() else "an eager tensor", decision)
            return horovod_plain(tensor)
        # Data-dependent (never NaN) so it is neither pruned nor folded.
        touch = 0.0 * tf.cast(tf.math.is_nan(tf.reshape(tensor, [-1])[0]), tf.float32)
        control = tf.stack([1.0 + touch, float(hvd.rank()) + touch])
        return control, (tensor, decision)

    def decompress(self, tensor, ctx):
        """The compressed sum, scaled by the factor Horovod's op applied to [1, ...]."""
        if ctx is None or isinstance(ctx, tf.DType):  # sent plain (horovod_plain)
            return tensor if ctx is None else tf.cast(tensor, ctx)
        original, decision = ctx
        name = C.collective_name(original, f"q8.{self.name}.")
        req = policy.request(self, decision.n, layer_group(original.shape.rank), name or "q8.eager")
        total = C.compressed_sum(None if name is None else self.state, req, C.as_flat_float32(original),
                                 name is not None, self.warmup_steps, self.format.seed,
                                 scale=factor_from_control(tensor))
        return tf.reshape(tf.cast(total, original.dtype), original.shape)

    def __repr__(self) -> str:
        return f"Q8Compressor({self.format.name})"


HOROVOD_FLOATS = (tf.float16, tf.float32, tf.float64)  # Horovod's allreduce sums these as they are


def horovod_plain(tensor: tf.Tensor):
    """(what goes to Horovod's own allreduce, the dtype to return to or None): a float dtype that
    Horovod refuses (bfloat16) goes as float32."""
    if tensor.dtype.is_floating and tensor.dtype not in HOROVOD_FLOATS:
        return tf.cast(tensor, tf.float32), tensor.dtype
    return tensor, None


def factor_from_control(control: tf.Tensor) -> tf.Tensor:
    """The factor Horovod's op, prescale and postscale applied, from the reduced [1, rank]."""
    n_ranks = float(hvd.size())
    zero = tf.debugging.assert_none_equal(
        control[0], 0.0, message="horovod_q8: prescale_factor or postscale_factor is 0, which makes "
                                 "every gradient 0; use a non-zero factor")
    with tf.control_dependencies([zero]):
        ratio = control[1] / control[0]
    check = tf.debugging.assert_near(
        ratio, tf.constant((n_ranks - 1) / 2, tf.float32), rtol=1e-3, atol=1e-3,
        message="horovod_q8 compression supports op=Sum and op=Average only "
                "(Adasum, Min, Max and Product cannot be computed from quantized codes)")
    with tf.control_dependencies([check]):
        return control[0] / n_ranks


def tell_uncompressed(what: str, decision: policy.Decision) -> None:
    """One log line per reason that is not 'too small': what goes uncompressed and why."""
    if decision.reason.startswith("fewer than") or decision.reason in _TOLD:
        return
    _TOLD.add(decision.reason)
    _LOG.warning("horovod_q8: %s goes uncompressed through Horovod (%s)", what, decision.reason)


AGREEMENTS = Agreements()


def _gather(obj: Any, name: str) -> list:
    with tf.init_scope():  # eagerly, also while a tf.function is traced
        return hvd.allgather_object(obj, name=name)


def agree(compression: Any, label: str, once: bool = False, **more: Any) -> None:
    """Every rank states its compression (and `more`, plain JSON values) at `label`
    (collective.agreement): a difference raises ConfigMismatchError on every rank; a rank that
    never comes ends the job after the timeout."""
    if hvd.size() < 2:
        return
    (AGREEMENTS.once if once else AGREEMENTS.agree)(_gather, hvd.rank(),
                                                     {"compression": describe(compression), **more}, label)


class RefusedOption(ValueError):
    """An option horovod_q8 cannot honour, said in one sentence even from inside tf.function."""

    ag_pass_through = True  # raised as is from inside tf.function, not wrapped in a traceback


def check_op(op) -> None:
    """Refuse an op that cannot be computed from quantized codes (None: Horovod's Average)."""
    if op is not None and op not in (hvd.Average, hvd.Sum):
        raise RefusedOption(UNSUPPORTED_OP)


class ScaledThresholdsError(RefusedOption):
    """A threshold format under Keras' float16 mixed precision, whose gradients are loss-scaled."""


def refuse_scaled_thresholds(comp: Any) -> None:
    """The threshold formats send fixed levels; under the float16 policy Keras' LossScaleOptimizer
    hands Horovod gradients scaled by up to 2**15, so every level saturates and the update after
    unscaling is nearly nothing (twobit: the largest update fell from 5.0e-2 to 6.1e-6)."""
    if tf.keras.mixed_precision.global_policy().compute_dtype != "float16":
        return
    if isinstance(comp, AutoCompressorBase):  # refused whether or not this link would choose them
        fixed = [n for n, c in comp.compressors.items() if isinstance(c, Setting) and c.format.kind != formats.CODEBOOK]
        if fixed:
            raise ScaledThresholdsError(
                f"horovod_q8: Auto may choose {' and '.join(fixed)}, which send fixed levels, but under the "
                "mixed_float16 policy the loss scale multiplies every gradient Horovod is handed, so those levels "
                f"would clip them; leave {' and '.join(fixed)} out of allow=, or use a float32 / mixed_bfloat16 policy")
    elif isinstance(comp, Setting) and comp.format.kind != formats.CODEBOOK:
        raise ScaledThresholdsError(
            f"horovod_q8: {comp.format.name} sends fixed levels, but under the mixed_float16 policy the loss "
            "scale multiplies every gradient Horovod is handed, so its levels would clip them; use q8 or q4 "
            "(scaled per block), or a float32 / mixed_bfloat16 policy")


def check_same_config(comp: Setting) -> None:
    """Once per setting and process: every rank must use exactly the same settings (and a
    threshold format is refused under loss scaling)."""
    refuse_scaled_thresholds(comp)
    agree(comp, "compressor", once=True)


def compressor(name: str = "q8", **options):
    """A compressor for `hvd.DistributedOptimizer(..., compression=...)`: "none" and "fp16" are
    Horovod's own, so one flag covers every choice; options as `collective.setting.by_name`."""
    made = by_name(name, **options)
    if made is None:
        return getattr(hvd.Compression, name)
    return Q8Compressor(made[0], **made[1])
