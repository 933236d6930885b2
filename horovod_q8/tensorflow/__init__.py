"""horovod_q8 for TensorFlow: compressors for Horovod's `compression=` argument.

    import horovod.tensorflow.keras as hvd
    from horovod_q8.tensorflow import Compression
    opt = hvd.DistributedOptimizer(opt, compression=Compression.q8)

Importing this module wraps Horovod's reducer factory (`horovod_api`), so optimizers and
tapes built with a horovod_q8 compressor reduce their gradients in fused buckets.
"""
from typing import Optional, Sequence

from horovod_q8.collective.auto import DEFAULT_ALLOW
from horovod_q8.formats import COMPRESSION_NAMES
from horovod_q8.tensorflow import compressor as _fixed
from horovod_q8.tensorflow import horovod_api
from horovod_q8.tensorflow.auto import AutoCompressor, auto
from horovod_q8.tensorflow.compressor import ConfigMismatchError, Q8Compressor
from horovod_q8.tensorflow.fused import FusedReducer
from horovod_q8.tensorflow.state import CompressionState, state_of
from horovod_q8.tensorflow.tape import DistributedGradientTape

horovod_api.install()


def compressor(name: str = "q8", *, allow: Optional[Sequence[str]] = None, **options):
    """A compressor for `hvd.DistributedOptimizer(..., compression=...)` by name: "auto" (each
    bucket's format chosen from the measured link and codec, among `allow`), "none" and "fp16"
    (Horovod's own), or a horovod_q8 format; options as `horovod_q8.collective.setting.by_name`."""
    if name == "auto":
        return auto(DEFAULT_ALLOW if allow is None else allow, **options)
    if allow is not None:
        raise TypeError("allow= is an option of compressor('auto') only")
    return _fixed.compressor(name, **options)


class Compression:
    """Every compression by name, Horovod's `none` and `fp16` included."""

    none = compressor("none")
    fp16 = compressor("fp16")
    q8 = compressor("q8")
    q8_dynamic_tree = compressor("q8_dynamic_tree")
    q8_linear = compressor("q8_linear")
    q8_mantissa = compressor("q8_mantissa")
    q8_static_tree = compressor("q8_static_tree")
    q4 = compressor("q4")
    q4_threshold = compressor("q4_threshold")
    twobit = compressor("twobit")
    auto = compressor("auto")


Q8 = Compression.q8
Q4 = Compression.q4
Auto = Compression.auto

__all__ = ["Auto", "AutoCompressor", "COMPRESSION_NAMES", "Compression", "CompressionState",
           "ConfigMismatchError", "DistributedGradientTape", "FusedReducer", "Q4", "Q8", "Q8Compressor",
           "compressor", "state_of"]
