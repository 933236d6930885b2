"""The data types: codebooks, block scaling, thresholds and bit packing."""
from horovod_q8.formats.spec import CODEBOOK, THRESHOLD, Format, get, layer_group, names

# Every choice of --compression: Horovod's own two, then ours.
COMPRESSION_NAMES = ("none", "fp16", *names())

__all__ = ["CODEBOOK", "COMPRESSION_NAMES", "THRESHOLD", "Format", "get", "layer_group", "names"]
