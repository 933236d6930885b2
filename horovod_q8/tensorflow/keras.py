"""Keras: `DistributedOptimizer` with the signature of Horovod's, fused and compressed."""
from __future__ import annotations

import horovod.tensorflow.keras as hvd_keras

from horovod_q8.tensorflow.fused import DEFAULT_FUSION_BYTES
from horovod_q8.tensorflow.horovod_api import reducer_options


def DistributedOptimizer(optimizer, compression=None, fusion_bytes: int = DEFAULT_FUSION_BYTES,
                         **kwargs):
    """`horovod.tensorflow.keras.DistributedOptimizer` with buckets of up to `fusion_bytes`,
    each through one compressed allreduce (what the stock one with compression=Q8 does too,
    with 64 MiB buckets)."""
    compression = compression or hvd_keras.Compression.none
    with reducer_options(fusion_bytes=fusion_bytes):
        return hvd_keras.DistributedOptimizer(optimizer, compression=compression, **kwargs)
