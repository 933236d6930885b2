"""Keras: `DistributedOptimizer` with the signature of Horovod's, fused and compressed."""
from __future__ import annotations

import horovod.tensorflow.keras as hvd_keras

from horovod_q8.tensorflow.fused import DEFAULT_FUSION_BYTES, fused_allreduce


def DistributedOptimizer(optimizer, compression=None, fusion_bytes: int = DEFAULT_FUSION_BYTES,
                         **kwargs):
    """Like `horovod.tensorflow.keras.DistributedOptimizer`, but gradients travel in buckets
    of up to `fusion_bytes`, each through one compressed allreduce."""
    compression = compression or hvd_keras.Compression.none
    with fused_allreduce(compression, fusion_bytes):
        return hvd_keras.DistributedOptimizer(optimizer, compression=compression, **kwargs)
