"""Under horovodrun: ranks with different compression settings must stop with a clear error.

argv[1] = "block" (rank 1 uses another block size), "format" (rank 1 uses q4), "min_size"
(rank 1 would not compress this tensor at all), "horovod_none" (rank 1 uses Horovod's own none in
hvd.allreduce), "optimizer_none" (the same in hvd.DistributedOptimizer): ConfigMismatchError on
every rank, printed as MISMATCH-DETECTED. "horovod_unwrapped" (rank 1 calls Horovod's allreduce
directly, as a script without horovod_q8 would): rank 0's watchdog ends the job with a message.
"auto_vs_q8" (rank 0 uses Auto, rank 1 q8), "auto_override" (rank 1 alone sets HOROVOD_Q8_AUTO=q8),
"auto_allow" (rank 1 allows q4 too): ConfigMismatchError on every rank, before any calibration.
"fusion_bytes" (both q8, the fused tape's buckets 64 MiB on rank 0, 1 MiB on rank 1, so their
buckets differ): ConfigMismatchError on every rank, before any bucket is sent.
"variable_order" (both q8, rank 1 hands the fused tape two same-shaped variables in the other
order) and "unused_on_one_rank" (rank 1's loss leaves one variable out, so its gradient is None
there): the same buckets, but the sum would add unrelated gradients (Horovod's own allreduce
waits forever): ConfigMismatchError on every rank, naming the gradients.
"""
from __future__ import annotations

import os
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.tensorflow import ConfigMismatchError, compressor

hvd.init()
if sys.argv[1] == "block":
    comp = compressor("q8", block_size=1024 if hvd.rank() == 0 else 512)
elif sys.argv[1] == "min_size":
    comp = compressor("q8", min_size=1024 if hvd.rank() == 0 else 100_000)
elif sys.argv[1] in ("horovod_none", "horovod_unwrapped", "optimizer_none"):
    comp = compressor("q8") if hvd.rank() == 0 else hvd.Compression.none
elif sys.argv[1] == "auto_vs_q8":
    comp = compressor("auto" if hvd.rank() == 0 else "q8")
elif sys.argv[1] == "auto_override":
    if hvd.rank() == 1:
        os.environ["HOROVOD_Q8_AUTO"] = "q8"
    comp = compressor("auto")
elif sys.argv[1] in ("fusion_bytes", "variable_order", "unused_on_one_rank"):
    comp = compressor("q8")
elif sys.argv[1] == "auto_allow":
    comp = compressor("auto", allow=("none", "fp16", "q8") if hvd.rank() == 0 else ("none", "fp16", "q8", "q4"))
else:
    comp = compressor("q8" if hvd.rank() == 0 else "q4")
x = tf.constant(np.ones(5000, np.float32))
try:
    if sys.argv[1] == "horovod_unwrapped" and hvd.rank() == 1:
        from horovod.tensorflow import mpi_ops
        tf.function(lambda t: mpi_ops._allreduce(t))(x)
    elif sys.argv[1] == "fusion_bytes":
        from horovod_q8.tensorflow import DistributedGradientTape
        ws = [tf.Variable(tf.ones(300_000)), tf.Variable(tf.ones(300_000))]

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(ws[0] * ws[1])
            tape = DistributedGradientTape(tape, compression=comp, fusion_bytes=64 << 20 if hvd.rank() == 0 else 1 << 20)
            return tape.gradient(loss, ws)
        step()
    elif sys.argv[1] in ("variable_order", "unused_on_one_rank"):
        from horovod_q8.tensorflow import DistributedGradientTape
        a, b, c = (tf.Variable(tf.ones(3000) * k) for k in (1.0, 2.0, 3.0))
        listed = [b, a, c] if sys.argv[1] == "variable_order" and hvd.rank() == 1 else [a, b, c]

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(a * a) + tf.reduce_sum(3.0 * b)
                if not (sys.argv[1] == "unused_on_one_rank" and hvd.rank() == 1):
                    loss += tf.reduce_sum(c)
            return DistributedGradientTape(tape, compression=comp).gradient(loss, listed)
        step()
    elif sys.argv[1] == "optimizer_none":
        import horovod.tensorflow.keras as hvd_keras
        hvd_keras.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), compression=comp)
    else:
        tf.function(lambda t: hvd.allreduce(t, compression=comp))(x)
except ConfigMismatchError as e:
    print(f"MISMATCH-DETECTED rank {hvd.rank()}: {e}", flush=True)
    sys.exit(0)
print("NO ERROR", flush=True)
sys.exit(1)
