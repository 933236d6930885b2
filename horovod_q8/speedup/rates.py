"""Codec throughput presets (elements per second, encode and decode), with their source.

cpu: measured here by `horovod-q8 bench formats` (docs/results.md section 1: 25M float32 on a
2-core AMD EPYC VM, Numba kernels; fp16 is TensorFlow's cast there and back, split evenly).
gpu: an assumption, not a measurement: memory-bound kernels at about 60% of a P100/V100-class
HBM (700-900 GB/s), about 9 bytes moved per element to encode (absmax pass, read, write) and
about 5 to decode. None: free (infinitely fast) codecs.
"""
from __future__ import annotations

import math

INF = math.inf
GB = 1e9 / 4  # float32 elements per second in one GB/s of float32 input

# format: (encode GB/s, decode GB/s) of float32 input, measured.
_CPU_GBPS = {
    "q8": (1.64, 4.53), "q8_dynamic_tree": (1.64, 4.53), "q8_linear": (1.49, 4.6),
    "q8_mantissa": (1.48, 2.41), "q8_static_tree": (1.51, 4.69), "q4": (1.92, 4.12),
    "twobit": (0.712, 4.17), "q4_threshold": (1.08, 5.15),
}
_CPU_FP16 = 25e6 / (0.121 / 2)  # 121 ms for cast + cast back of 25M elements

PRESETS = ("cpu", "gpu", "none")
SOURCES = {
    "cpu": "measured: horovod-q8 bench formats, 2-core AMD EPYC VM (docs/results.md section 1)",
    "gpu": "assumed: memory-bound kernels at ~60% of P100/V100 HBM bandwidth (not measured)",
    "none": "free codecs (upper bound on what compression can give)",
}


def rates(preset: str, method: str) -> tuple[float, float]:
    """(encode, decode) elements/s of `method` ("none", "fp16" or a format) under `preset`."""
    if preset not in PRESETS:
        raise ValueError(f"codec preset must be one of {PRESETS}, got {preset!r}")
    if method in ("none", "fp32") or preset == "none":
        return INF, INF
    if preset == "gpu":
        return (1e11, 1e11) if method == "fp16" else (5e10, 1e11)
    if method == "fp16":
        return _CPU_FP16, _CPU_FP16
    enc, dec = _CPU_GBPS.get(method, _CPU_GBPS["q8"])
    return enc * GB, dec * GB
