"""The data types: codebooks, block scaling, thresholds and bit packing."""
from horovod_q8.formats.spec import CODEBOOK, THRESHOLD, Format, get, layer_group, names

__all__ = ["CODEBOOK", "THRESHOLD", "Format", "get", "layer_group", "names"]
