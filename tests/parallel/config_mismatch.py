"""Under horovodrun: ranks with different compression settings must stop with a clear error.

argv[1] = "block" (rank 1 uses another block size) or "format" (rank 1 uses q4).
Prints MISMATCH-DETECTED on every rank that raised ConfigMismatchError.
"""
from __future__ import annotations

import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.tensorflow import ConfigMismatchError, compressor

hvd.init()
if sys.argv[1] == "block":
    comp = compressor("q8", block_size=1024 if hvd.rank() == 0 else 512)
else:
    comp = compressor("q8" if hvd.rank() == 0 else "q4")
x = tf.constant(np.ones(5000, np.float32))
try:
    tf.function(lambda t: hvd.allreduce(t, compression=comp))(x)
except ConfigMismatchError as e:
    print(f"MISMATCH-DETECTED rank {hvd.rank()}: {e}", flush=True)
    sys.exit(0)
print("NO ERROR", flush=True)
sys.exit(1)
