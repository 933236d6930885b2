"""Diagnostic: one call of ResNet-50's gradient list through the stock optimizer's reducer
(16 MiB buckets), per host call: label, start and duration (ms from the call's start), rank 0.

    PYTHONPATH=<tree> horovod-q8 cluster --hosts 2 --bandwidth 1gbit -- python r50_timeline.py
"""
import os
import time

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.bench.allreduce import optimizer_reducer, resnet50_shapes
from horovod_q8.tensorflow import bridge, compressor

hvd.init()
shapes = resnet50_shapes()
grads = [tf.constant(np.random.default_rng(i + 10 * hvd.rank()).standard_normal(s).astype(np.float32))
         for i, s in enumerate(shapes)]
fn = tf.function(optimizer_reducer(compressor("q8"), False, 16 << 20))
totals = []
REPS = int(os.environ.get("REPS", "9"))
for rep in range(REPS):
    bridge.PROFILE = [] if rep >= 3 else None
    t0 = time.perf_counter()
    [g.numpy() for g in fn(grads)]
    t1 = time.perf_counter()
    totals.append(t1 - t0)
    if rep >= 3 and hvd.rank() == 0 and rep in (4, 7):
        ev = sorted(bridge.PROFILE, key=lambda e: e[1])
        busy = sum(e - a for _, a, e in ev)
        print(f"call {rep}: {1e3 * (t1 - t0):.0f} ms, host calls busy {1e3 * busy:.0f} ms: "
              + ", ".join(f"{n.replace('q8_', '')}@{1e3 * (a - t0):.0f}+{1e3 * (e - a):.0f}" for n, a, e in ev),
              flush=True)
if hvd.rank() == 0:
    print(f"median of calls 3-{REPS - 1}: {1e3 * np.median(totals[3:]):.0f} ms; all: "
          + " ".join(f"{1e3 * t:.0f}" for t in totals), flush=True)
