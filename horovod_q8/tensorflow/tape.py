"""`DistributedGradientTape` with the signature of Horovod's, fused and compressed."""
from __future__ import annotations

import horovod.tensorflow as hvd

from horovod_q8.tensorflow.fused import DEFAULT_FUSION_BYTES
from horovod_q8.tensorflow.horovod_api import reducer_options


def DistributedGradientTape(gradtape, compression=None, fusion_bytes: int = DEFAULT_FUSION_BYTES,
                            **kwargs):
    """`hvd.DistributedGradientTape` with fused, compressed gradients (same arguments)."""
    compression = compression or hvd.Compression.none
    with reducer_options(fusion_bytes=fusion_bytes):
        return hvd.DistributedGradientTape(gradtape, compression=compression, **kwargs)
