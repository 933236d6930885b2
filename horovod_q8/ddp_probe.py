"""One DDP step with horovod_q8's ddp_hook on a 1-rank Gloo process group: does the hook run
here? `horovod-q8 doctor` runs it in a subprocess (a stuck process group cannot stop the report)."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path


def probe() -> str:
    """A line saying what ran; raises what went wrong."""
    start = time.perf_counter()
    import torch
    import torch.distributed as dist

    from horovod_q8.torch import Q8HookState, ddp_hook

    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=Path(d, "store").as_uri(), rank=0, world_size=1)
        try:
            torch.manual_seed(0)
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
            state = Q8HookState("q8", min_size=0)
            model.register_comm_hook(state, ddp_hook)
            model(torch.randn(8, 64)).square().mean().backward()
            grad = model.module.weight.grad
            if state.iter != 1 or grad is None or not bool(torch.isfinite(grad).all()) or not bool(grad.any()):
                raise RuntimeError(f"the hook ran but the gradient is wrong (steps {state.iter}, grad {grad})")
        finally:
            dist.destroy_process_group()
    return f"a 1-rank Gloo DDP step with ddp_hook (q8) ran in {time.perf_counter() - start:.1f} s"


def main() -> None:
    try:
        print(probe(), flush=True)
    except Exception as e:  # reported by the doctor as one line
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
