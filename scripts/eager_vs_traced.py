"""Eager against traced `hvd.allreduce` of none and q8 at 4K to 16M elements (best and median of 5
timed calls after a warm-up, each between barriers), on rank 0:
    horovodrun -np 2 -H localhost:2 --gloo python scripts/eager_vs_traced.py
Why Auto does not time q8 at 4M eagerly (docs/auto.md)."""
import time
import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd
from horovod_q8.tensorflow import compressor
from horovod_q8.collective.auto import probe_values

hvd.init()
comps = {"none": compressor("none"), "q8": compressor("q8")}
out = []
for n in (4096, 1 << 20, 1 << 22, 1 << 24):
    x = tf.constant(probe_values(n))
    for name, c in comps.items():
        f = tf.function(lambda t, c=c, name=name, n=n: hvd.allreduce(t, compression=c, op=hvd.Sum, name=f"tr.{name}.{n}"))
        def eager(c=c, name=name, n=n):
            hvd.allreduce(x, compression=c, op=hvd.Sum, name=f"eg.{name}.{n}").numpy()
        def traced(f=f):
            f(x).numpy()
        for label, fn in (("eager", eager), ("traced", traced)):
            fn()
            ts = []
            for _ in range(5):
                hvd.allreduce(tf.constant(0.0), name="bar").numpy()
                t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
            out.append((n, name, label, min(ts) * 1e3, float(np.median(ts)) * 1e3))
if hvd.rank() == 0:
    for r in out:
        print("n=%9d %5s %6s best %.2f ms median %.2f ms" % r)
