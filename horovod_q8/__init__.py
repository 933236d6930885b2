"""8-bit and 4-bit gradient and activation compression for Horovod.

`import horovod_q8` needs only NumPy; the Horovod compressors live in
`horovod_q8.tensorflow` and load TensorFlow and Horovod on first use.
"""
from horovod_q8.codec import dequantize, nbytes, quantize
from horovod_q8.formats import Format, names as format_names

__version__ = "0.1.0"
__all__ = ["Format", "dequantize", "format_names", "nbytes", "quantize"]
