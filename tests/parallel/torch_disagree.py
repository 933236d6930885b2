"""Ranks that disagree about compression must all end, with a sentence, never hang.

    python torch_disagree.py ddp_hook_on_one_rank          # torch.multiprocessing, 2 Gloo ranks
    horovodrun -np 2 ... python torch_disagree.py CASE     # CASE below, horovod.torch

horovod.torch cases (rank 0 compresses with q8, rank 1 does not): optimizer_vs_none (rank 1
hvd.DistributedOptimizer with compressor("none")), allreduce_vs_none (hvd.allreduce with
compressor("none")), none_vs_optimizer (the other way round), allreduce_unwrapped (rank 1 calls
Horovod's allreduce directly, as a script without horovod_q8 would), fusion_bytes (both q8, the
fused optimizer with buckets of 64 MiB on rank 0 and 4 kB on rank 1). Each rank prints
"DISAGREEMENT rank R: <message>" when it caught ConfigMismatchError; the watchdog ends a rank
that waits for one that never comes.
"""
from __future__ import annotations

import datetime
import os
import sys
import tempfile

import torch


def ddp_hook_on_one_rank(rank: int, size: int, init_file: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from horovod_q8.torch.common import ConfigMismatchError
    from horovod_q8.torch.ddp import Q8HookState, ddp_hook

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=600))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    if rank == 0:
        model.register_comm_hook(Q8HookState("q8", min_size=0), ddp_hook)
    x = torch.randn(32, 64)
    try:
        model(x).square().mean().backward()
    except ConfigMismatchError as e:
        print(f"DISAGREEMENT rank {rank}: {e}", flush=True)
        os._exit(2)
    except Exception as e:  # rank 1: DDP's own allreduce, ended when rank 0 went away
        print(f"ENDED rank {rank}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        os._exit(3)
    print(f"NO ERROR rank {rank}", flush=True)
    os._exit(0)


def horovod_case(case: str) -> None:
    import horovod.torch as hvd

    from horovod_q8.torch import ConfigMismatchError, compressor

    hvd.init()
    rank = hvd.rank()
    q8_here = (rank == 0) != (case == "none_vs_optimizer") or case == "fusion_bytes"
    comp = compressor("q8") if q8_here else compressor("none")
    model = torch.nn.Linear(64, 32)
    x = torch.randn(5000)
    try:
        if case in ("optimizer_vs_none", "none_vs_optimizer"):
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters(), compression=comp)
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
        elif case == "fusion_bytes":
            import horovod_q8.torch as q8t
            q8t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
                                     compression=comp, fusion_bytes=64 << 20 if rank == 0 else 4000)
        elif case == "allreduce_vs_none":
            hvd.allreduce(x, name="g", compression=comp)
        elif case == "allreduce_unwrapped":
            if q8_here:
                hvd.allreduce(x, name="g", compression=comp)
            else:
                from horovod.torch import mpi_ops
                mpi_ops.synchronize(mpi_ops.allreduce_async(x, name="g"))
        else:
            raise SystemExit(f"unknown case {case!r}")
    except ConfigMismatchError as e:
        print(f"DISAGREEMENT rank {rank}: {e}", flush=True)
        sys.exit(0)
    print(f"NO ERROR rank {rank}", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "ddp_hook_on_one_rank":
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(ddp_hook_on_one_rank, args=(2, os.path.join(tmp, "init")), nprocs=2,
                               join=False, start_method="spawn").join()
    else:
        horovod_case(sys.argv[1])
