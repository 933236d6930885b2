"""`horovod-q8 bench auto` (run under horovodrun or `horovod-q8 cluster`): Auto against every
fixed choice, side by side in one run, on the product path: `hvd.allreduce` of one tensor and
the stock `hvd.DistributedOptimizer` reducer on ResNet-50's gradients. Prints what Auto chose
and why, what its calibration cost, and how far it is from the fastest fixed choice it was
allowed and from `none`."""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Dict, List, Optional

import numpy as np

from horovod_q8.bench.common import kernels, markdown, ratio_range, round_ratios
from horovod_q8.collective import policy

FIXED = "none,fp16,q8,q4"


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench auto", description=__doc__)
    p.add_argument("--fixed", default=FIXED, help="the fixed compressions timed beside Auto")
    p.add_argument("--allow", default="none,fp16,q8", help="the formats Auto may choose")
    p.add_argument("--elements", type=int, default=25_600_000, help="the one tensor's float32 elements")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-resnet50", action="store_true", help="skip the ResNet-50 gradient list")
    p.add_argument("--fusion-mb", type=float, default=policy.DEFAULT_FUSION_BYTES / 2 ** 20,
                   help="bucket size of the stock optimizer path")
    return p


def verdict(times: Dict[str, List[float]], allow: List[str]) -> List[List[object]]:
    """Auto against the fastest allowed fixed choice and against none, per round's ratio."""
    fixed = {k: float(np.median(v)) for k, v in times.items() if k in allow}
    best = min(fixed, key=fixed.get)
    rows = []
    for base in dict.fromkeys([best, "none"]):
        if base not in times:
            continue
        ratio, lo, hi = round_ratios(times, base)["auto"]
        rows.append([f"auto vs {base}" + (" (fastest allowed)" if base == best else ""),
                     ratio, ratio_range(lo, hi), f"{(1 / ratio - 1) * 100:+.1f}%"])
    return rows


def run(args: argparse.Namespace) -> None:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.bench.allreduce import optimizer_reducer, resnet50_gradients, resnet50_shapes
    from horovod_q8.bench.breakdown import slowest_per_round
    from horovod_q8.bench.common import machine, readback, rounds
    from horovod_q8.collective.auto import SMALL
    from horovod_q8.cores import codec_threads
    from horovod_q8.tensorflow import compressor
    from horovod_q8.tensorflow.auto import probe
    from horovod_q8.tensorflow.traffic import bytes_per_step

    hvd.init()
    rank0 = hvd.rank() == 0
    allow = args.allow.split(",")
    fixed = args.fixed.split(",")
    auto = compressor("auto", allow=allow)

    def calibrated(label: str):
        t0 = time.perf_counter()
        plan = auto.plan()  # every rank: calibration, exchanged and agreed
        took = hvd.allreduce(tf.constant(time.perf_counter() - t0, tf.float64), op=hvd.Max,
                             name=f"bench.auto.calibration.{label}").numpy()
        return plan, took

    # each allowed path's first use (kernels loaded, connections made): what a run's first step
    # pays for the format it sends, with Auto or without
    t0 = time.perf_counter()
    first_use = probe(auto.compressors)
    for name in auto.allow:
        first_use.send(name, SMALL)
    opened = hvd.allreduce(tf.constant(time.perf_counter() - t0, tf.float64), op=hvd.Max,
                           name="bench.auto.first_use").numpy()
    _, first = calibrated("first")
    auto.recalibrate()
    plan, again = calibrated("again")  # with every buffer and connection of the probes warm
    if rank0:
        threads, why = codec_threads()
        print(f"# Auto benchmark: {hvd.size()} ranks, {machine()}; {threads} codec thread(s) per rank ({why}); "
              f"codec kernels: {kernels()}\n")
        print(f"Auto may choose {allow}; calibration took {first * 1e3:.0f} ms after the paths' first use "
              f"({opened * 1e3:.0f} ms, slowest rank); measured again once warm: {again * 1e3:.0f} ms "
              f"(measuring {plan.calibration.seconds * 1e3:.0f} ms)\n")
        print("\n".join("    " + line for line in plan.describe()) + "\n", flush=True)
        # every figure the choices rest on, so a log can be replayed against other cost models:
        # AutoPlan(Auto(allow), Calibration.from_dict(json.loads(...)))
        print(f"calibration: {json.dumps(plan.calibration.to_dict())}\n", flush=True)

    def table(title: str, fns: dict, nbytes: dict, chosen: str) -> None:
        times = slowest_per_round(rounds(fns, args.repeats))
        if not rank0:
            return
        vs16 = round_ratios(times, "fp16")
        rows = [[name, float(np.median(ts)) * 1e3, nbytes[name] / 1e6, vs16.get(name, ("",))[0]]
                for name, ts in times.items()]
        print(f"## {title}\n\nAuto chose: {chosen}\n\n"
              + markdown(["compression", "ms", "MB sent/rank", "speedup vs fp16"], rows) + "\n\n"
              + markdown(["Auto", "time ratio (median over rounds)", "range", "Auto slower by"],
                         verdict(times, allow))
              + f"\n\nms: the slowest rank's median of {args.repeats} rounds, each compression once per "
                "round in an order shuffled each round; ratios: base time / Auto time within a round\n", flush=True)

    n = args.elements
    x = tf.constant(np.random.default_rng(hvd.rank()).standard_normal(n).astype(np.float32))
    fns, nbytes = {}, {}
    for name in fixed + ["auto"]:
        comp = auto if name == "auto" else compressor(name)
        f = tf.function(lambda t, c=comp, c_name=name: hvd.allreduce(t, compression=c, name=f"bench.auto.tensor.{c_name}"))
        fns[name] = lambda f=f: readback(f(x))
        nbytes[name] = bytes_per_step([(n,)], comp, hvd.size())
    table(f"hvd.allreduce of one tensor of {n} float32 ({n * 4 / 2 ** 20:.1f} MiB)", fns, nbytes,
          plan.choose(n).name)

    if not args.no_resnet50:
        shapes = resnet50_shapes()
        grads = resnet50_gradients(shapes, hvd.rank())
        fusion = int(args.fusion_mb * 2 ** 20)
        fns, nbytes = {}, {}
        for name in fixed + ["auto"]:
            comp = auto if name == "auto" else compressor(name)
            fn = optimizer_reducer(comp, False, fusion, f"DistributedSGD_{name}")  # names of its own
            fns[name] = lambda fn=fn: readback(fn(grads))
            nbytes[name] = bytes_per_step(shapes, comp, hvd.size(), fusion_bytes=fusion)
        sizes = [sum(policy.numel(shapes[m]) for m in b) for b in policy.plan_buckets(shapes, fusion, 4)]
        if rank0:
            print(f"ResNet-50 buckets (elements): {sizes}\n", flush=True)
        picks = Counter(ch.name for ch in plan.choose_step(sizes))
        chosen = ", ".join(f"{k} for {v} of {len(sizes)} buckets" for k, v in picks.items())
        table(f"ResNet-50 gradients ({len(shapes)} tensors), the stock hvd.DistributedOptimizer path, "
              f"buckets of {args.fusion_mb:g} MiB", fns, nbytes, chosen)


def main(argv=None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
