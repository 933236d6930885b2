"""The DDP hook on N Gloo ranks (torch.multiprocessing): `python torch_ddp_checks.py N CHECK...`.

Checks: error budgets and bit-identical results of every format, NaN/Inf, warm-up, DDP
training with the hook (ranks identical, close to plain DDP), the config check, state_dict.
Any failed check raises in its rank, so the run exits non-zero; a rank that hangs is ended by
the process group's timeout.
"""
from __future__ import annotations

import contextlib
import datetime
import faulthandler
import hashlib
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from horovod_q8.torch.common import ConfigMismatchError
from horovod_q8.torch.ddp import Q8HookState, average, ddp_hook

BUDGET = {"q8": 0.03, "q8_linear": 0.03, "q8_mantissa": 0.05, "q8_static_tree": 0.1, "q4": 0.3}
SIZES = (1, 1023, 4099, 70_001)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.detach().contiguous().numpy().tobytes()).hexdigest()


def same_on_all_ranks(t: torch.Tensor) -> bool:
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, digest(t))
    return len(set(everyone)) == 1


def exact_average(x: torch.Tensor) -> torch.Tensor:
    y = x.double()
    dist.all_reduce(y)
    return y / dist.get_world_size()


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).abs().mean() / ref.abs().mean())


def rank_data(n: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + dist.get_rank())
    return torch.randn(n, generator=g).to(dtype)


def check_budgets() -> None:
    for name, budget in BUDGET.items():
        for schedule in ("auto", "two_phase", "allgather"):
            state = Q8HookState(name, min_size=0, schedule=schedule)
            for i, n in enumerate(SIZES):
                x = rank_data(n, i)
                ref = exact_average(x)
                y = average(state, x.clone(), f"t{i}")
                assert y.dtype == torch.float32 and y.shape == x.shape
                assert same_on_all_ranks(y), (name, schedule, n)
                assert rel_err(y, ref) < budget, (name, schedule, n, rel_err(y, ref))
    # float16 and float64 buckets come back in their own dtype
    for dtype in (torch.float16, torch.float64):
        x = rank_data(5000, 7, dtype)
        y = average(Q8HookState("q8"), x.clone(), "half")
        assert y.dtype == dtype and same_on_all_ranks(y.float())
        assert rel_err(y.float(), exact_average(x.float())) < 0.03


def check_small_stays_exact() -> None:
    """Below min_size a bucket goes as a plain allreduce: the float32 average up to rounding."""
    x = rank_data(100, 3)
    y = average(Q8HookState("q4", min_size=1024), x.clone(), "small")
    assert torch.allclose(y.double(), exact_average(x), rtol=1e-6, atol=1e-7)


def check_nan_inf() -> None:
    for schedule in ("two_phase", "allgather"):
        x = rank_data(6000, 11)
        if dist.get_rank() == 1:
            x[17] = float("nan")
            x[5000] = float("inf")
        y = average(Q8HookState("q8", schedule=schedule), x, "naninf")
        assert same_on_all_ranks(y)
        assert torch.isnan(y[17]) and not torch.isfinite(y[5000])
        assert torch.isfinite(y[1024:4000]).all()


def check_threshold_feedback() -> None:
    """Error feedback through the state's residuals: the running sum tracks the exact one."""
    for name, scale in (("twobit", 0.2), ("q4_threshold", 0.003)):
        state = Q8HookState(name, min_size=0)
        x = scale * rank_data(5000, 5)
        ref = exact_average(x)
        got = torch.zeros(5000, dtype=torch.float64)
        for _ in range(40):
            y = average(state, x.clone(), "fb")
            assert same_on_all_ranks(y)
            got += y.double()
        assert rel_err(got / 40, ref) < 0.1, name
        assert state.residuals is not None and state.residuals.tensors


class Net(torch.nn.Module):
    """Conv, dense and bias parameters: every q4_threshold layer group in the buckets."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3)
        self.fc1 = torch.nn.Linear(8 * 6 * 6, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x)).flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))


def train(hook_state, steps: int = 6, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=0.05)
    if hook_state is not None:
        model.register_comm_hook(hook_state, ddp_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    grads = []
    for _ in range(steps):
        x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), grads


def check_ddp_training() -> None:
    plain, plain_grads = train(None)
    for name, budget in (("q8", 0.05), ("q4", 0.35), ("q4_threshold", 1.0)):
        state = Q8HookState(name, min_size=64, warmup_steps=2)
        weights, grads = train(state)
        assert same_on_all_ranks(weights), name
        assert state.iter == 6, state.iter
        # warm-up steps: DDP's plain average (same data, same weights) up to float rounding
        for k in range(2):
            assert torch.allclose(grads[k], plain_grads[k], rtol=1e-5, atol=1e-6), (name, k)
        after = rel_err(grads[2], plain_grads[2].double())
        assert 0 < after < budget, (name, after)
        assert rel_err(weights, plain.double()) < 0.05, name


class Unused(Net):
    """Net with a parameter no step uses (DDP's find_unused_parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.spare = torch.nn.Linear(4, 4)


def train_with(hook_state, net=Net, dtype=torch.float32, accumulate: int = 1, steps: int = 4, **ddp):
    """Weights after `steps` steps of DDP(net) in `dtype` with DDP options `ddp`, each step
    `accumulate` micro-batches (all but the last under no_sync)."""
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(net().to(dtype), **{"bucket_cap_mb": 0.05, **ddp})
    if hook_state is not None:
        model.register_comm_hook(hook_state, ddp_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(steps):
        opt.zero_grad()
        for k in range(accumulate):
            x, y = torch.randn(16, 1, 8, 8, generator=g).to(dtype), torch.randint(0, 10, (16,), generator=g)
            with model.no_sync() if k + 1 < accumulate else contextlib.nullcontext():
                torch.nn.functional.cross_entropy(model(x).float(), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def gloo_carries(dtype: torch.dtype) -> bool:
    try:
        dist.broadcast(torch.zeros(1, dtype=dtype), 0)
        return True
    except RuntimeError:
        return False


def check_ddp_options() -> None:
    """The hook under DDP's options users set: bfloat16 and float64 models, gradient accumulation
    with no_sync(), gradient_as_bucket_view, static_graph, find_unused_parameters: every rank the
    same weights, close to plain DDP's with the same options."""
    cases = {"bfloat16": dict(dtype=torch.bfloat16), "float64": dict(dtype=torch.float64),
             "no_sync": dict(accumulate=2), "bucket_view": dict(gradient_as_bucket_view=True),
             "static_graph": dict(static_graph=True), "unused": dict(net=Unused, find_unused_parameters=True)}
    if not gloo_carries(torch.bfloat16):  # torch 2.0.1's Gloo: plain DDP itself cannot start
        del cases["bfloat16"]
    for case, kw in cases.items():
        plain = train_with(None, **kw)
        for name in ("q8", "auto"):
            state = Q8HookState(name, min_size=64)
            weights = train_with(state, **kw)
            assert same_on_all_ranks(weights), (case, name)
            assert state.iter == 4, (case, name, state.iter)
            err = rel_err(weights, plain)
            assert err < 0.05, (case, name, err)


def check_compiled() -> None:
    """torch.compile over the DDP model with the hook (Dynamo's DDPOptimizer splits the graph at
    bucket boundaries): every rank the same weights, close to the eager run's."""
    eager = train_with(Q8HookState("q8", min_size=64), bucket_cap_mb=25)  # Dynamo wants the first bucket no larger
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    state = Q8HookState("q8", min_size=64)
    model.register_comm_hook(state, ddp_hook)
    compiled, opt = torch.compile(model), torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(4):
        x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(compiled(x), y).backward()
        opt.step()
    weights = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    assert state.iter == 4 and same_on_all_ranks(weights), state.iter  # the hook ran at every step
    assert rel_err(weights, eager) < 0.01, rel_err(weights, eager)


def check_config_mismatch() -> None:
    block = 1024 if dist.get_rank() == 0 else 512
    try:
        average(Q8HookState("q8", block_size=block), rank_data(5000, 1), "mismatch")
    except ConfigMismatchError as e:
        assert "block_size=" in str(e), e
    else:
        raise AssertionError("different block sizes were not detected")
    try:
        Q8HookState("q8", process_group="default")
    except TypeError as e:
        assert "process_group must be None" in str(e), e
    else:
        raise AssertionError("a process_group that is not one was accepted")
    # the hook's state loaded on rank 0 alone: past the warm-up there, not on the other ranks
    state = Q8HookState("q8", warmup_steps=3)
    if dist.get_rank() == 0:
        saved = state.state_dict()
        saved["iter"] = 5
        state.load_state_dict(saved)
    try:
        average(state, rank_data(5000, 2), "resumed")
    except ConfigMismatchError as e:
        assert "warmup_steps_left=0 here vs 3 there" in str(e) or "warmup_steps_left=3 here vs 0 there" in str(e), e
    else:
        raise AssertionError("ranks on different warm-up steps were not stopped")


def check_state_dict() -> None:
    """A restored state continues exactly as the uninterrupted one (residuals and step)."""
    x = 0.003 * rank_data(5000, 9)
    a = Q8HookState("q4_threshold", min_size=0)
    for _ in range(3):
        average(a, x.clone(), "sd")
    saved = a.state_dict()
    b = Q8HookState("q4_threshold", min_size=0)
    b.load_state_dict(saved)
    ya, yb = average(a, x.clone(), "sd"), average(b, x.clone(), "sd")
    assert torch.equal(ya, yb) and a.iter == b.iter
    try:
        Q8HookState("q8").load_state_dict(saved)
    except ValueError:
        return
    raise AssertionError("a state saved with another setting was loaded")


def check_auto() -> None:
    """compression="auto": each bucket as its chosen format gives it (the same bits), identical
    ranks, DDP training, a restored state that chooses the same without measuring, the override,
    and ranks allowed different formats stopped with a clear error."""
    allow = ("none", "fp16", "q8", "q4")
    state = Q8HookState("auto", allow=allow)
    for i, n in enumerate((100, 5000, 300_000)):
        x = rank_data(n, 20 + i)
        y = average(state, x.clone(), f"auto{i}")
        assert same_on_all_ranks(y), n
        chosen = state.auto_state.plan.choose(n).name
        if chosen == "none":
            assert torch.allclose(y.double(), exact_average(x), rtol=1e-6, atol=1e-7), n
        else:
            if chosen != "fp16":  # exactly what the hook with that format gives
                fixed = average(Q8HookState(chosen, min_size=state.auto.min_size), x.clone(), f"auto{i}")
                assert torch.equal(y, fixed), (n, chosen)
            assert rel_err(y, exact_average(x)) < BUDGET.get(chosen, 0.01), (n, chosen)
    restored = Q8HookState("auto", allow=allow)
    restored.load_state_dict(state.state_dict())
    average(restored, rank_data(5000, 30), "restored")
    assert restored.auto_state.plan.restored
    assert restored.auto_state.plan.fingerprint() == state.auto_state.plan.fingerprint()
    os.environ["HOROVOD_Q8_AUTO"] = "q4"
    try:
        forced = Q8HookState("auto", allow=allow)
        average(forced, rank_data(5000, 31), "forced")
        assert [c.name for _, _, c in forced.auto_state.plan.classes()] == ["none", "q4"]
    finally:
        del os.environ["HOROVOD_Q8_AUTO"]
    only = Q8HookState("auto", allow=("q8",))  # none not allowed: still timed, as the link
    assert same_on_all_ranks(average(only, rank_data(5000, 33), "only"))
    assert {c.name for _, _, c in only.auto_state.plan.classes()} == {"q8"}
    weights, _ = train(Q8HookState("auto", allow=allow))
    assert same_on_all_ranks(weights)
    try:
        average(Q8HookState("auto", allow=allow[: 3 + (dist.get_rank() > 0)]), rank_data(5000, 32), "mismatch")
    except ConfigMismatchError as e:
        assert "allow=" in str(e), e
        return
    raise AssertionError("ranks allowed different formats were not stopped")


class TwoSquares(torch.nn.Module):
    """p2's gradient is exactly 0, p1's is not; DDP's first buckets hold [p1, p2], its rebuilt
    ones (in the order gradients became ready) [p2, p1]: the same sizes in another order."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.p1 = torch.nn.Parameter(torch.randn(64, 64, generator=g) / 8)
        self.p2 = torch.nn.Parameter(torch.randn(64, 64, generator=g) / 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.p1
        return (h @ (self.p2 * 0)).sum() + h.square().sum()


def check_rebuilt_buckets() -> None:
    """A residual goes back only to the parameters that left it: after DDP rebuilds its buckets
    in another order, a gradient of exactly 0 stays 0 under error feedback (each format)."""
    for fmt, options in (("twobit", {}), ("q8", {"error_feedback": True}), ("q4_threshold", {})):
        model = torch.nn.parallel.DistributedDataParallel(TwoSquares())
        order = []

        def hook(state, bucket, order=order):
            order.append([id(p) for p in bucket.parameters()])
            return ddp_hook(state, bucket)

        model.register_comm_hook(Q8HookState(fmt, **options), hook)
        g = torch.Generator().manual_seed(1 + dist.get_rank())
        for step in range(4):
            model.zero_grad()
            model(torch.randn(8, 64, generator=g)).backward()
            assert model.module.p2.grad.abs().max().item() == 0.0, (fmt, step, model.module.p2.grad.abs().max())
            assert model.module.p1.grad.abs().max().item() > 0, (fmt, step)
        assert order[0] != order[-1] and sorted(order[0]) == sorted(order[-1]), "DDP did not reorder the bucket"


def check_bucket_mismatch() -> None:
    """Ranks whose DDP buckets differ (bucket_cap_mb on one rank) stop with a sentence naming the
    bucket, instead of exchanging mismatched sizes inside Gloo."""
    net = torch.nn.Sequential(torch.nn.Linear(32, 20000), torch.nn.ReLU(), torch.nn.Linear(20000, 8))  # > 1 MB
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.1 if dist.get_rank() else 25,
                                                      find_unused_parameters=True)  # buckets from the start
    model.register_comm_hook(Q8HookState("q8"), ddp_hook)
    try:
        for _ in range(3):  # buckets past DDP's first (1 MB) differ; after the first step, its rebuilt ones too
            model(torch.randn(4, 32)).square().mean().backward()
    except ConfigMismatchError as e:
        assert "DDP bucket" in str(e) and "bucket_cap_mb" in str(e), e
    else:
        raise AssertionError("ranks with different DDP buckets were not stopped")


def check_sparse_refused() -> None:
    """A sparse gradient (nn.Embedding(sparse=True)) stops with a sentence, as itself."""
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Embedding(100, 8, sparse=True))
    model.register_comm_hook(Q8HookState("q8"), ddp_hook)
    try:
        model(torch.arange(4)).sum().backward()
    except ValueError as e:
        assert "compresses dense gradients" in str(e) and "sparse=False" in str(e), e
    else:
        raise AssertionError("a sparse gradient was accepted")


CHECKS = {f.__name__[len("check_"):]: f for f in (
    check_budgets, check_small_stays_exact, check_nan_inf, check_threshold_feedback,
    check_ddp_training, check_ddp_options, check_compiled, check_config_mismatch, check_state_dict, check_auto,
    check_rebuilt_buckets, check_sparse_refused, check_bucket_mismatch)}


def worker(rank: int, size: int, init_file: str, checks: list) -> None:
    # A rank stuck anywhere prints its stacks and ends instead of waiting for the test's timeout.
    faulthandler.dump_traceback_later(300, exit=True)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    try:
        for name in checks:
            CHECKS[name]()
            dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    if rank == 0:
        print(f"OK {size} ranks: {' '.join(checks)}", flush=True)
    # Not destroy_process_group(): in torch 2.0.1 it can deadlock (seen 1 run in 12 here): it
    # joins Gloo's worker threads holding the GIL while a worker frees a finished allgather
    # whose tensor has a Python object, which needs the GIL (ProcessGroupGloo::~ProcessGroupGloo
    # waiting in std::thread::join, the worker in gil_scoped_acquire). Every check is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list) -> None:
    size, checks = int(argv[0]), argv[1:] or list(CHECKS)
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise SystemExit(f"unknown checks {sorted(unknown)}; known: {sorted(CHECKS)}")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(size, os.path.join(tmp, "rendezvous"), checks), nprocs=size, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])
