"""ResNet-50's 214 gradient shapes through horovod.torch's DistributedOptimizer: Horovod's own none
and fp16 against horovod_q8's q8 (horovod_q8.torch, its default buckets), the paths alternating
each round; a step is `opt.step()` after a backward that only fills the gradients; the slowest
rank's median step and the median of the rounds' ratios to fp16. `local` is the same step
with torch's SGD alone (no reduction): a step less `local` is what its reduction adds, the
figure to set beside `horovod-q8 bench allreduce --resnet50` (TensorFlow, no backward).

    horovod-q8 cluster --hosts 2 --bandwidth 1gbit -- python scripts/torch_step.py [--rounds 9]
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--compressions", default="local,none,fp16,q8")
    args = p.parse_args()

    import horovod.torch as hvd
    import torch

    import horovod_q8.torch as q8t
    from horovod_q8.bench.allreduce import resnet50_shapes
    from horovod_q8.bench.common import kernels, machine

    hvd.init()
    torch.set_num_threads(1)
    shapes = resnet50_shapes()

    def build(name: str) -> Callable[[], None]:
        params = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in shapes])
        named = [(f"{name}.{i}", q) for i, q in enumerate(params)]
        opt = torch.optim.SGD(params.parameters(), lr=0.0)
        if name != "local":
            opt = hvd.DistributedOptimizer(opt, named_parameters=named,
                                           compression=q8t.compressor(name))  # none, fp16: Horovod's own
        grads = [torch.randn(s, generator=torch.Generator().manual_seed(1000 * hvd.rank() + i))
                 for i, s in enumerate(shapes)]

        def step() -> None:
            opt.zero_grad()
            sum((q * g).sum() for q, g in zip(params, grads)).backward()
            opt.step()
        return step

    paths = {name: build(name) for name in args.compressions.split(",")}
    for step in paths.values():  # first use: buffers, kernels, connections
        step()
        step()
    times: Dict[str, List[float]] = {name: [] for name in paths}
    for r in range(args.rounds):
        for name, step in paths.items():
            hvd.allreduce(torch.zeros(1), name=f"torch_step.together.{r}.{name}")
            t0 = time.perf_counter()
            step()
            took = time.perf_counter() - t0
            times[name].append(max(hvd.allgather_object(took, name=f"torch_step.took.{r}.{name}")))
    if hvd.rank() == 0:
        print(f"# torch ResNet-50 step: {hvd.size()} ranks, {machine()}; codec kernels: {kernels()}; "
              f"{args.rounds} rounds, torch {torch.__version__}\n")
        print("| compression | ms | the reduction's ms (less local) | vs fp16 (median of the rounds' ratios) |\n"
              "|---|---|---|---|")
        for name, ts in times.items():
            ratio = (statistics.median(f / t for f, t in zip(times["fp16"], ts))
                     if "fp16" in times and name != "local" else None)
            extra = ("" if "local" not in times or name == "local" else
                     f"{statistics.median(t - o for t, o in zip(ts, times['local'])) * 1e3:.0f}")
            shown = "" if ratio is None else f"{ratio:.2f}x"
            print(f"| {name} | {statistics.median(ts) * 1e3:.0f} | {extra} | {shown} |")


if __name__ == "__main__":
    main()
