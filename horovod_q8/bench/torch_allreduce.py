"""`horovod-q8 bench allreduce --framework torch` (under horovodrun): `hvd.allreduce` of one
float32 torch tensor (op=Average) per compression, side by side in one run: Horovod's none and
fp16 (`hvd.Compression.fp16`) and horovod_q8's formats. Rounds interleave the compressions;
each figure is the slowest rank's median. Also bytes sent per rank (the plan's) and the
result's relative error against the exact average."""
from __future__ import annotations

import argparse
import time
from typing import Dict, List

import numpy as np

# (option, default): options of `bench allreduce` that the torch path does not take.
TENSORFLOW_ONLY = (("resnet50", False), ("breakdown", False), ("no_sizes", False), ("pipeline_elements", "0"))


def problems(args: argparse.Namespace) -> List[str]:
    """What `--framework torch` cannot honour."""
    out = [f"--{dest.replace('_', '-')} is TensorFlow-only" for dest, default in TENSORFLOW_ONLY
           if getattr(args, dest, default) != default]
    if args.repeats < 1:
        out.append(f"--repeats must be >= 1, got {args.repeats}")
    return out


def _compression(name: str):
    from horovod_q8.torch import compressor
    return compressor(name)


def _slowest_median(times: List[float], hvd, torch) -> float:
    mine = torch.tensor([float(np.median(times))], dtype=torch.float64)
    return float(hvd.allreduce(mine, op=hvd.Max, name="bench.torch.max"))


def measure(hvd, torch, n: int, names: List[str], repeats: int) -> Dict[str, tuple]:
    """name -> (slowest-rank median seconds, bytes sent per rank, relative L2 error)."""
    from horovod_q8.collective import policy
    from horovod_q8.torch import Q8Compressor

    x = torch.from_numpy(np.random.default_rng(hvd.rank()).standard_normal(n).astype(np.float32))
    exact = hvd.allreduce(x.double(), op=hvd.Average, name="bench.torch.exact")
    comps = {name: _compression(name) for name in names}
    times: Dict[str, List[float]] = {name: [] for name in names}
    errors = {}
    for name, comp in comps.items():  # warm-up (Numba, buffers) and the error
        y = hvd.allreduce(x, op=hvd.Average, compression=comp, name=f"bench.torch.{name}")
        errors[name] = float(torch.linalg.norm(y.double() - exact) / torch.linalg.norm(exact))
    for _ in range(repeats):
        for name, comp in comps.items():
            hvd.barrier()
            t = time.perf_counter()
            hvd.allreduce(x, op=hvd.Average, compression=comp, name=f"bench.torch.{name}")
            times[name].append(time.perf_counter() - t)
    out = {}
    for name, comp in comps.items():
        setting = comp if isinstance(comp, Q8Compressor) else name
        out[name] = (_slowest_median(times[name], hvd, torch),
                     policy.bytes_per_step([(n,)], setting, hvd.size(), fused=False), errors[name])
    return out


def run(args: argparse.Namespace) -> None:
    found = problems(args)
    if found:
        raise SystemExit("horovod-q8 bench allreduce --framework torch: " + "; ".join(found))
    import horovod
    import horovod.torch as hvd
    import torch

    from horovod_q8.bench.common import machine, markdown

    hvd.init()
    names = args.compressions.split(",")
    if hvd.rank() == 0:
        print(f"# allreduce benchmark (horovod.torch {horovod.__version__}, torch {torch.__version__}): "
              f"{hvd.size()} ranks, {machine()}\n", flush=True)
    for n in [int(float(v)) for v in args.elements.split(",")]:
        results = measure(hvd, torch, n, names, args.repeats)
        if hvd.rank() != 0:
            continue
        base, half = results.get("none"), results.get("fp16")
        rows = [[name, t * 1e3, nbytes / 1e6, base[0] / t if base else "", half[0] / t if half else "", err]
                for name, (t, nbytes, err) in results.items()]
        print(f"## one tensor of {n} float32 ({n * 4 / 1e6:g} MB), hvd.allreduce op=Average, "
              f"slowest rank's median of {args.repeats}\n\n"
              + markdown(["compression", "ms", "MB sent/rank", "speedup vs fp32", "speedup vs fp16",
                          "rel. L2 error"], rows) + "\n", flush=True)
