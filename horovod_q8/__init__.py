"""8-bit and 4-bit gradient and activation compression for Horovod.

`import horovod_q8` needs only NumPy; the Horovod compressors live in
`horovod_q8.tensorflow` and load TensorFlow and Horovod on first use.
"""
from horovod_q8.codec import dequantize, nbytes, quantize
from horovod_q8.formats import Format, names as format_names

__version__ = "0.1.0"
__all__ = ["Auto", "Compression", "Format", "Q4", "Q8", "compressor", "dequantize", "format_names",
           "nbytes", "quantize"]


def __getattr__(name: str):
    # The Horovod compressors need TensorFlow and Horovod: load them on first use only.
    if name in ("Auto", "Q8", "Q4", "Compression", "compressor"):
        from horovod_q8 import tensorflow as _tf
        return getattr(_tf, name)
    raise AttributeError(f"module 'horovod_q8' has no attribute {name!r}")
