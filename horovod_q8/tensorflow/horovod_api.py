"""Horovod's private API, fenced: the one place horovod_q8 reaches into Horovod's internals.

Horovod's `DistributedOptimizer` (TF and Keras) and `DistributedGradientTape` build their
reducer with `horovod.tensorflow._make_allreduce_grads_fn`. When that function is the one we
know (Horovod 0.28, same signature), `install()` wraps it: for a horovod_q8 compressor it
returns a `FusedReducer` (buckets, owned state), so the one-line switch
`hvd.DistributedOptimizer(opt, compression=Q8)` is the fast path. Every other compressor gets
Horovod's own function untouched. Where Horovod differs, nothing is patched and a warning
says so: Horovod then calls our compressor per tensor, which is correct, only slower.
HOROVOD_Q8_FUSED=0 turns the fused path off.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import threading
from typing import Optional

import horovod
import horovod.tensorflow as hvd
import tensorflow as tf

from horovod_q8.options import NON_GLOBAL_PROCESS_SET, NON_GLOBAL_PROCESS_SET_PART
from horovod_q8.tensorflow.compressor import RefusedOption

KNOWN_VERSIONS = ("0.28.",)
KNOWN_PARAMETERS = ("name", "device_dense", "device_sparse", "compression", "sparse_as_dense", "op",
                    "gradient_predivide_factor", "groups", "process_set")
TAPE_NAME = "DistributedGradientTape"  # the name Horovod 0.28's tape gives its reducer
_LOG = logging.getLogger("horovod_q8")
_local = threading.local()  # fusion_bytes / off switch for reducers built in this thread
_original = None


def fence_problem() -> Optional[str]:
    """Why the private API cannot be used here, or None when it is the one we know."""
    version = getattr(horovod, "__version__", "?")
    if not version.startswith(KNOWN_VERSIONS):
        return f"Horovod {version} is not a version horovod_q8 knows ({', '.join(KNOWN_VERSIONS)}x)"
    fn = _original or getattr(hvd, "_make_allreduce_grads_fn", None)
    if fn is None:
        return "horovod.tensorflow._make_allreduce_grads_fn is missing"
    params = tuple(inspect.signature(fn).parameters)
    if params != KNOWN_PARAMETERS:
        return f"horovod.tensorflow._make_allreduce_grads_fn{params} is not the signature we know"
    return None


def _make(name, device_dense, device_sparse, compression, sparse_as_dense, op,
          gradient_predivide_factor, groups, process_set=hvd.global_process_set):
    """Horovod's signature; a FusedReducer for a horovod_q8 compressor, else Horovod's own."""
    from horovod_q8.tensorflow.auto import AutoCompressor
    from horovod_q8.tensorflow.compressor import Q8Compressor, agree
    from horovod_q8.tensorflow.fused import DEFAULT_FUSION_BYTES, FusedReducer

    def horovods_own(comp):
        return _original(name, device_dense, device_sparse, comp, sparse_as_dense, op,
                         gradient_predivide_factor, groups, process_set)

    # A tape is rebuilt every step (often inside the traced step): its state cannot be its own.
    transient = name == TAPE_NAME or not tf.executing_eagerly()
    if not transient and process_set is hvd.global_process_set:  # every rank says what it compresses
        agree(compression, "DistributedOptimizer")
    if not isinstance(compression, (Q8Compressor, AutoCompressor)):
        return horovods_own(compression)
    if getattr(_local, "off", False) or os.environ.get("HOROVOD_Q8_FUSED", "1") == "0":
        if transient or isinstance(compression, AutoCompressor):
            return horovods_own(compression)
        own = compression.fresh()
        return PerTensorReducer(horovods_own(own), own.state)
    refused = []
    if device_dense or device_sparse:
        refused.append("device_dense/device_sparse (horovod_q8 places its collectives itself; "
                       "leave them empty)")
    if groups is not None:
        refused.append("groups (horovod_q8 fuses gradients into its own buckets; drop groups= "
                       "or set fusion_bytes on horovod_q8.tensorflow.keras.DistributedOptimizer)")
    if process_set is not hvd.global_process_set:
        refused.append(NON_GLOBAL_PROCESS_SET_PART)
    if refused:
        raise RefusedOption("horovod_q8 compression cannot honour " + "; ".join(refused))
    return FusedReducer(name, compression, sparse_as_dense, op, gradient_predivide_factor,
                        getattr(_local, "fusion_bytes", DEFAULT_FUSION_BYTES),
                        transient=transient)


class PerTensorReducer(tf.Module):
    """Horovod's own per-tensor reducer, called with a compressor whose state this optimizer
    owns (tracked by the optimizer, so its checkpoint saves the state)."""

    def __init__(self, allreduce_grads, state) -> None:
        super().__init__(name="horovod_q8_per_tensor_reducer")
        self._allreduce_grads = allreduce_grads
        self.state = state

    def __call__(self, grads, vars=None, use_generic_names=False):
        return self._allreduce_grads(grads, vars, use_generic_names)


def install() -> bool:
    """Wrap Horovod's reducer factory once; False (with a warning) where Horovod differs."""
    global _original
    if _original is not None:
        return True
    problem = fence_problem()
    if problem:
        _LOG.warning("horovod_q8: %s; optimizers call the compressor per tensor (correct, slower)", problem)
        return False
    _original = hvd._make_allreduce_grads_fn
    hvd._make_allreduce_grads_fn = _make
    _wrap_allreduce()
    return True


ALLREDUCE_PARAMETERS = ("tensor", "average", "device_dense", "device_sparse", "compression", "op",
                        "prescale_factor", "postscale_factor", "name", "process_set", "ignore_name_scope")


def _wrap_allreduce() -> None:
    """hvd.allreduce: every rank states its compression the first time it uses it (agreement)."""
    original = hvd.allreduce
    signature = inspect.signature(original)
    if tuple(signature.parameters) != ALLREDUCE_PARAMETERS:
        _LOG.warning("horovod_q8: horovod.tensorflow.allreduce is not the signature we know; ranks that "
                     "disagree about compression there are caught by the watchdog only")
        return

    @functools.wraps(original)
    def allreduce(tensor, *args, **kwargs):
        from horovod_q8.tensorflow.auto import AutoCompressor
        from horovod_q8.tensorflow.compressor import Q8Compressor, RefusedOption, agree, check_op

        bound = signature.bind(tensor, *args, **kwargs)
        bound.apply_defaults()
        if isinstance(bound.arguments["compression"], (Q8Compressor, AutoCompressor)):
            check_op(bound.arguments["op"])  # before Horovod, which refuses Adasum under Gloo in its own words
            if bound.arguments["process_set"] is not hvd.global_process_set:  # its ranks alone would wait for all
                raise RefusedOption(NON_GLOBAL_PROCESS_SET)
        if bound.arguments["process_set"] is hvd.global_process_set:
            agree(bound.arguments["compression"], "allreduce", once=True)
        return original(tensor, *args, **kwargs)

    hvd.allreduce = allreduce


def installed() -> bool:
    return _original is not None and hvd._make_allreduce_grads_fn is _make


@contextlib.contextmanager
def reducer_options(fusion_bytes: Optional[int] = None, per_tensor: bool = False):
    """While building an optimizer or tape: its bucket size, or Horovod's per-tensor path."""
    old = getattr(_local, "fusion_bytes", None), getattr(_local, "off", False)
    if fusion_bytes is not None:
        _local.fusion_bytes = int(fusion_bytes)
    _local.off = per_tensor
    try:
        yield
    finally:
        _local.fusion_bytes, _local.off = old
        if old[0] is None:
            del _local.fusion_bytes
