"""When each host call of one compressed step runs: ResNet-50's 214 gradients through the stock
hvd.DistributedOptimizer reducer (the default buckets, or --fusion-mb) and one tensor of as many
elements, rank 0's encode and decode calls in ms from the step's start. Where the wire waits
between buckets, the decodes show it: each bucket's decode runs once its collective is done.

    horovod-q8 cluster --hosts 2 --bandwidth 1gbit -- python scripts/step_timeline.py [--compression q8] [--steps 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compression", default="q8")
    p.add_argument("--steps", type=int, default=3, help="timed steps of each workload")
    p.add_argument("--fusion-mb", type=float, default=None, help="bucket size (default: the product's)")
    args = p.parse_args()

    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.bench.allreduce import optimizer_reducer, resnet50_gradients, resnet50_shapes
    from horovod_q8.bench.common import kernels, machine, readback
    from horovod_q8.collective import policy
    from horovod_q8.tensorflow import bridge, compressor

    hvd.init()
    comp = compressor(args.compression)
    shapes = resnet50_shapes()
    grads = resnet50_gradients(shapes, hvd.rank())
    n = sum(int(np.prod(s)) for s in shapes)
    x = tf.constant(np.random.default_rng(hvd.rank()).standard_normal(n).astype(np.float32))
    fusion = policy.DEFAULT_FUSION_BYTES if args.fusion_mb is None else int(args.fusion_mb * 2 ** 20)
    reducer = optimizer_reducer(comp, False, fusion, "timeline")
    tensor = tf.function(lambda t: hvd.allreduce(t, compression=comp, name="timeline.tensor"))
    if hvd.rank() == 0:
        print(f"# step timeline: {hvd.size()} ranks, {machine()}; codec kernels: {kernels()}; {args.compression}; "
              "host calls of rank 0 as label@start-end ms\n", flush=True)
    for name, step in [("ResNet-50 buckets", lambda: readback(reducer(grads))),
                       (f"one tensor of {n}", lambda: readback(tensor(x)))]:
        for _ in range(3):  # traced and warm
            step()
        for k in range(args.steps):
            hvd.allreduce(tf.constant(0.0), name=f"timeline.together.{name}.{k}")  # ranks start together
            bridge.PROFILE = []
            t0 = time.perf_counter()
            step()
            took = time.perf_counter() - t0
            calls, bridge.PROFILE = sorted(bridge.PROFILE, key=lambda r: r[1]), None
            if hvd.rank() == 0:
                spans = " ".join(f"{label}@{(a - t0) * 1e3:.0f}-{(b - t0) * 1e3:.0f}"
                                 for label, a, b in calls)
                print(f"{name}, step {k}: {took * 1e3:.1f} ms; {spans}", flush=True)


if __name__ == "__main__":
    main()
