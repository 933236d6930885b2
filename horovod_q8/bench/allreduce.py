"""`horovod-q8 bench allreduce` (run under horovodrun): time per allreduce for every
compression, side by side, with bytes sent per rank and speedups against fp32 and fp16."""
from __future__ import annotations

import argparse
from typing import List, Optional

import numpy as np

from horovod_q8.bench.common import READBACK, label
from horovod_q8.collective import policy

ALL = ["none", "fp16", "q8", "q8_linear", "q8_mantissa", "q8_static_tree", "q4", "q4_threshold",
       "twobit"]


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench allreduce", description=__doc__)
    p.add_argument("--framework", choices=("tensorflow", "torch"), default="tensorflow",
                   help="torch: horovod.torch's hvd.allreduce of --elements (bench/torch_allreduce.py)")
    p.add_argument("--elements", default="25600000", help="--framework torch: comma list of tensor sizes")
    p.add_argument("--sizes-mb", default="1,4,16,64,256", help="float32 tensor sizes in MB")
    p.add_argument("--compressions", default=",".join(ALL))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--resnet50", action="store_true", help="also ResNet-50's gradient list")
    p.add_argument("--no-sizes", action="store_true", help="skip the single-tensor sizes")
    p.add_argument("--fusion-mb", default=f"{policy.DEFAULT_FUSION_BYTES / 2 ** 20:g}",
                   help="comma list of bucket sizes (MiB) for the ResNet-50 stock path; each its own table")
    p.add_argument("--no-per-tensor", action="store_true", help="skip ResNet-50's per-tensor table")
    p.add_argument("--readback", choices=READBACK, default="one",
                   help="after each op read back one element (default: the op has finished) or every "
                        "result into NumPy (adds a copy of the whole result to every row)")
    p.add_argument("--breakdown", action="store_true",
                   help="where the time goes (codec, collectives, host calls, rest) for one tensor")
    p.add_argument("--breakdown-elements", type=int, default=25_600_000)
    p.add_argument("--pipeline-elements", default="0",
                   help="comma list; each q-format runs once per value (0: whole tensor), "
                        "labelled e.g. q8/p4194304")
    return p


def resnet50_shapes() -> List[tuple]:
    import tensorflow as tf
    m = tf.keras.applications.ResNet50(weights=None)
    return [tuple(v.shape) for v in m.trainable_variables]


def resnet50_gradients(shapes: List[tuple], rank: int) -> list:
    """Random normal float32 tensors of these shapes, different on every rank, the same each run."""
    import tensorflow as tf
    return [tf.constant(np.random.default_rng(i + 10 * rank).standard_normal(s).astype(np.float32))
            for i, s in enumerate(shapes)]


def run(args: argparse.Namespace) -> None:
    if getattr(args, "framework", "tensorflow") == "torch":
        from horovod_q8.bench import torch_allreduce
        return torch_allreduce.run(args)
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.bench.breakdown import slowest_per_round
    from horovod_q8.bench.common import kernels, machine, markdown, ratio_range, readback, round_ratios, rounds
    from horovod_q8.tensorflow import compressor
    from horovod_q8.tensorflow.traffic import bytes_per_step

    hvd.init()
    pipelines = [int(v) for v in args.pipeline_elements.split(",")]
    names = [(name, p) for name in args.compressions.split(",")
             for p in ([0] if name in ("none", "fp16") else pipelines)]
    rank0 = hvd.rank() == 0
    if rank0:
        print(f"# allreduce benchmark: {hvd.size()} ranks, {machine()}; codec kernels: {kernels()}\n", flush=True)
    if "auto" in args.compressions.split(","):  # calibrate first, on every rank; say what it chose
        lines = compressor("auto").plan().describe()
        if rank0:
            print("\n".join("    " + line for line in lines) + "\n", flush=True)

    def report(title: str, times: dict, nbytes: dict) -> None:
        if not rank0:
            return
        vs32, vs16 = round_ratios(times, "none"), round_ratios(times, "fp16")
        rows = [[name, float(np.median(ts)) * 1e3, nbytes[name] / 1e6, vs32.get(name, ("",))[0],
                 vs16.get(name, ("",))[0], ratio_range(*vs16[name][1:]) if name in vs16 else ""]
                for name, ts in times.items()]
        print(f"## {title}\n\n" + markdown(["compression", "ms", "MB sent/rank", "speedup vs fp32",
                                           "speedup vs fp16", "vs fp16, range over rounds"], rows)
              + f"\n\nms: the slowest rank's median of {args.repeats} rounds, every compression once "
              "per round in an order shuffled each round, then a read-back of "
              + ("one element" if args.readback == "one" else "every result into NumPy")
              + "; speedups: the median of the ratios within a round\n", flush=True)

    if args.breakdown:
        from horovod_q8.bench import breakdown
        breakdown.run(args.breakdown_elements, names, args.repeats, args.readback)

    if not args.no_sizes:
        for mb in [float(s) for s in args.sizes_mb.split(",")]:
            n = int(mb * 2 ** 20 / 4)
            x = tf.constant(np.random.default_rng(hvd.rank()).standard_normal(n).astype(np.float32))
            fns, nbytes = {}, {}
            for name, pipe in names:
                comp = compressor(name, pipeline_elements=pipe) if pipe else compressor(name)
                tag = f"b{mb}.{name}.{pipe}"  # names of its own (optimizer_reducer says why)
                f = tf.function(lambda t, c=comp, tag=tag: hvd.allreduce(t, compression=c, name=tag))
                fns[label(name, pipe)] = lambda f=f: readback(f(x), args.readback)
                nbytes[label(name, pipe)] = bytes_per_step([(n,)], comp, hvd.size())
            report(f"one tensor of {mb:g} MB ({n} float32)", slowest_per_round(rounds(fns, args.repeats)), nbytes)

    if args.resnet50:
        shapes = resnet50_shapes()
        grads = resnet50_gradients(shapes, hvd.rank())
        modes = [(False, float(mb)) for mb in args.fusion_mb.split(",")] + ([] if args.no_per_tensor else [(True, 0.0)])
        for per_tensor, fusion_mb in modes:
            fns, nbytes = {}, {}
            for name, pipe in names:
                comp = compressor(name, pipeline_elements=pipe) if pipe else compressor(name)
                fn = optimizer_reducer(comp, per_tensor, int(fusion_mb * 2 ** 20), f"DistributedSGD_{name}_{pipe}")
                fns[label(name, pipe)] = lambda fn=fn: readback(fn(grads), args.readback)
                nbytes[label(name, pipe)] = bytes_per_step(shapes, comp, hvd.size(), fused=not per_tensor,
                                                           fusion_bytes=int(fusion_mb * 2 ** 20) or 1)
            times = slowest_per_round(rounds(fns, args.repeats))
            n = sum(int(np.prod(s)) for s in shapes)
            how = ("per tensor (HOROVOD_Q8_FUSED=0: Horovod calls the compressor per gradient)" if per_tensor
                   else f"the stock hvd.DistributedOptimizer path (horovod_q8: fused buckets of {fusion_mb:g} MiB)")
            report(f"ResNet-50 gradients ({len(shapes)} tensors, {n} float32), {how}", times, nbytes)


def optimizer_reducer(comp, per_tensor: bool, fusion_bytes: int = 64 << 20, name: str = "DistributedSGD"):
    """What `hvd.DistributedOptimizer(opt, compression=comp, name=name)` reduces its gradients
    with. Paths timed side by side need names of their own: a run has one format per collective
    name, and a name that comes back with another size (q8's bucket, then q4's) costs Horovod a
    fresh negotiation each time."""
    import horovod.tensorflow as hvd

    from horovod_q8.tensorflow.horovod_api import reducer_options

    with reducer_options(fusion_bytes=fusion_bytes or None, per_tensor=per_tensor):
        return hvd._make_allreduce_grads_fn(name, "", "", comp, False, hvd.Average, 1.0, None,
                                            hvd.global_process_set)


def main(argv=None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
