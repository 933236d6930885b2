"""What reading a fused bucket in place saves: ResNet-50's 214 gradients in 16 MiB buckets,
reduced three ways side by side (each once per round, in an order shuffled every round):

- `reducer`: the stock hvd.DistributedOptimizer path (each gradient in its slot, encoded in
  place, the sum split back as views: collective/bucket_parts.py);
- `concat`: the same buckets concatenated by tf.concat, sent as one tensor through the same
  engine, split by tf.split (what the reducer did before it read buckets in place);
- `lone`: tensors of the buckets' sizes, already flat (no bucket to build: the floor).

    horovodrun -np 2 -H localhost:2 --gloo python scripts/bucket_copies.py [--compression q8] [--repeats 21]
    horovod-q8 cluster --hosts 2 --bandwidth none -- python scripts/bucket_copies.py
"""
from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compression", default="q8")
    p.add_argument("--repeats", type=int, default=21)
    args = p.parse_args()

    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.bench.allreduce import optimizer_reducer, resnet50_shapes
    from horovod_q8.bench.breakdown import slowest_per_round
    from horovod_q8.bench.common import machine, readback, rounds
    from horovod_q8.bench.common import kernels
    from horovod_q8.collective import policy
    from horovod_q8.tensorflow import compressor

    hvd.init()
    shapes = resnet50_shapes()
    fusion = 16 << 20
    buckets = policy.plan_buckets(shapes, fusion, 4)
    sizes = [sum(policy.numel(shapes[m]) for m in b) for b in buckets]
    rng = np.random.default_rng(hvd.rank())
    grads = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    lone = [tf.constant(rng.standard_normal(n).astype(np.float32)) for n in sizes]
    comp = compressor(args.compression)

    @tf.function
    def concat(gs):
        out = []
        for b, members in enumerate(buckets):
            flat = tf.concat([tf.reshape(gs[m], [-1]) for m in members], 0)
            total = hvd.allreduce(flat, compression=comp, name=f"bucket_copies.concat{b}")
            out += [tf.reshape(t, shapes[m]) for t, m in
                    zip(tf.split(total, [policy.numel(shapes[m]) for m in members]), members)]
        return out

    @tf.function
    def alone(ts):
        return [hvd.allreduce(t, compression=comp, name=f"bucket_copies.lone{b}") for b, t in enumerate(ts)]

    reducer = optimizer_reducer(comp, False, fusion)
    fns = {"reducer": lambda: readback(reducer(grads)), "concat": lambda: readback(concat(grads)),
           "lone": lambda: readback(alone(lone))}
    times = slowest_per_round(rounds(fns, args.repeats))
    if hvd.rank() == 0:
        print(f"# bucket copies: {hvd.size()} ranks, {machine()}; codec kernels: {kernels()}; "
              f"{args.compression}, ResNet-50's {len(shapes)} gradients in {len(buckets)} buckets of 16 MiB\n")
        print("| path | ms (median) | min | vs concat (median of ratios) |\n|---|---|---|---|")
        for name, ts in times.items():
            ratio = np.median(np.array(times["concat"]) / np.array(ts))
            print(f"| {name} | {np.median(ts) * 1e3:.1f} | {min(ts) * 1e3:.1f} | {ratio:.3f} |")
        print(f"\nms: the slowest rank's, {args.repeats} rounds, each path once per round in a shuffled order; "
              "ratio: concat's time / the path's, within a round")


if __name__ == "__main__":
    main()
