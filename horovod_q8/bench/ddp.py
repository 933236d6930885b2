"""`horovod-q8 bench ddp`: DDP training steps per communication hook, side by side in one run.

DDP's own allreduce (fp32), torch's `fp16_compress_hook` and horovod_q8's `ddp_hook` per
format, on Gloo, no Horovod; the same model, data and initial weights for each. Rounds
interleave the hooks; a figure is the slowest rank's median step. Ranks are spawned here on
loopback (`--ranks`), or come one per host from mpirun or `horovod-q8 cluster` (rank and size
from OpenMPI's environment, rank 0's address from HOROVOD_Q8_HOST0, which the cluster sets):

    horovod-q8 bench ddp --ranks 2
    horovod-q8 cluster --hosts 2 --bandwidth 1gbit -- horovod-q8 bench ddp
"""
from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

from horovod_q8.cores import share

BASELINES = ("none", "fp16")  # DDP's allreduce; torch's fp16_compress_hook


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench ddp", description=__doc__)
    p.add_argument("--compressions", default="none,fp16,q8,q4",
                   help="none (DDP's allreduce), fp16 (torch's fp16_compress_hook), horovod_q8 formats")
    p.add_argument("--ranks", type=int, default=2, help="processes to spawn (ignored under mpirun)")
    p.add_argument("--width", type=int, default=4096, help="MLP 784-W-W-10 (4096: 20M parameters)")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--steps", type=int, default=5, help="timed steps per hook and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    p.add_argument("--port", type=int, default=29531, help="rank 0's store port under mpirun")
    return p


def problems(args: argparse.Namespace) -> List[str]:
    from horovod_q8 import formats

    out = []
    for name in args.compressions.split(","):
        if name not in BASELINES and name not in formats.names():
            out.append(f"unknown compression {name!r}; known: {', '.join((*BASELINES, *formats.names()))}")
    for opt in ("ranks", "width", "batch_size", "steps", "rounds"):
        if getattr(args, opt) < 1:
            out.append(f"--{opt.replace('_', '-')} must be >= 1, got {getattr(args, opt)}")
    if args.bucket_mb <= 0:
        out.append(f"--bucket-mb must be > 0, got {args.bucket_mb}")
    return out


def _mlp(torch, width: int):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 10))


def _hooked(torch, args, name: str):
    """A DDP model with the hook of `name`, and the element counts of its buckets."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    from horovod_q8.torch.ddp import Q8HookState, ddp_hook

    model = torch.nn.parallel.DistributedDataParallel(_mlp(torch, args.width), bucket_cap_mb=args.bucket_mb)
    buckets: List[int] = []
    if name == "fp16":
        inner, state = fp16_compress_hook, None
    elif name != "none":
        inner, state = ddp_hook, Q8HookState(name)
    else:
        inner = None
    if inner is not None:
        def hook(st, bucket):
            if bucket.index() == 0:  # the last step's buckets (DDP rebuilds them after the first)
                buckets.clear()
            buckets.append(bucket.buffer().numel())
            return inner(st, bucket)
        model.register_comm_hook(state, hook)
    return model, buckets


def _bytes(name: str, buckets: List[int], n_params: int, ranks: int) -> float:
    """Bytes one rank sends per step: the ring's for the baselines, the engine's plan per bucket."""
    from horovod_q8.collective import policy
    from horovod_q8.torch.common import make_setting

    if name in BASELINES:
        return policy.ring_bytes(n_params, policy.BASELINE_BYTES[name], ranks)
    setting = make_setting(name)
    return float(sum(policy.decide(setting, True, n, ranks).bytes_compressed for n in buckets))


def measure(args, rank: int, size: int) -> Optional[Dict[str, tuple]]:
    """name -> (slowest rank's median step seconds, bytes sent per rank per step); rank 0 only."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(share(size))
    names = args.compressions.split(",")
    models = {name: _hooked(torch, args, name) for name in names}
    opts = {name: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for name, (m, _) in models.items()}
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(args.batch_size, 784, generator=g), torch.randint(0, 10, (args.batch_size,), generator=g)

    def step(name: str) -> None:
        opts[name].zero_grad()
        torch.nn.functional.cross_entropy(models[name][0](x), y).backward()  # the hooks run here
        opts[name].step()

    for name in names:  # warm-up: Numba, buffers, DDP's bucket rebuild after the first step
        for _ in range(2):
            step(name)
    times: Dict[str, List[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            dist.barrier()
            for _ in range(args.steps):
                t = time.perf_counter()
                step(name)
                times[name].append(time.perf_counter() - t)
    n_params = sum(p.numel() for p in models[names[0]][0].parameters())
    out = {}
    for name in names:
        slowest = torch.tensor([float(np.median(times[name]))], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        out[name] = (float(slowest), _bytes(name, models[name][1], n_params, size))
    return out if rank == 0 else None


def report(args, results: Dict[str, tuple], size: int, where: str) -> None:
    from horovod_q8.bench.common import machine, markdown

    fp16 = results.get("fp16", (None,))[0]
    fp32 = results.get("none", (None,))[0]
    rows = []
    for name, (t, sent) in results.items():
        label = {"none": "none (DDP allreduce)", "fp16": "fp16 (torch fp16_compress_hook)"}.get(name, f"{name} (ddp_hook)")
        rows.append([label, 1e3 * t, args.batch_size * size / t, sent / 1e6,
                     fp16 / t if fp16 else float("nan"), fp32 / t if fp32 else float("nan")])
    print(f"## bench ddp: MLP 784-{args.width}-{args.width}-10, batch {args.batch_size}/rank, {size} ranks "
          f"({where}), Gloo, bucket_cap_mb {args.bucket_mb:g}, {args.rounds} rounds x {args.steps} steps\n"
          f"# {machine()}\n")
    print(markdown(["hook", "step ms", "images/s", "MB sent/rank/step", "vs fp16", "vs fp32"], rows), flush=True)


def _worker(rank: int, size: int, init: str, args, where: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=600))
    results = measure(args, rank, size)
    dist.barrier()
    if results is not None:
        report(args, results, size, where)
    # no destroy_process_group(): torch 2.0.1 can deadlock in it (docs/torch.md); all is printed
    os._exit(0)


def run(args: argparse.Namespace) -> None:
    from horovod_q8.workloads.common import refuse

    refuse(problems(args), build_parser)
    size_env = os.environ.get("OMPI_COMM_WORLD_SIZE")
    if size_env:  # one rank per process that mpirun (or horovod-q8 cluster) started
        if "HOROVOD_Q8_IFACE" in os.environ:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", os.environ["HOROVOD_Q8_IFACE"])
        host0 = os.environ.get("HOROVOD_Q8_HOST0", "127.0.0.1")
        where = "emulated hosts, mpirun" if "HOROVOD_Q8_HOST0" in os.environ else "mpirun"
        _worker(int(os.environ["OMPI_COMM_WORLD_RANK"]), int(size_env), f"tcp://{host0}:{args.port}", args, where)
        return
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(args.ranks, f"file://{tmp}/rendezvous", args, "loopback"),
                 nprocs=args.ranks, join=True)
