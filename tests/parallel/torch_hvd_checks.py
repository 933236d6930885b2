"""Under horovodrun: horovod.torch with horovod_q8 compressors, against Horovod's exact fp32 path.

`python torch_hvd_checks.py FORMATS [CHECK...]`. Checks error budgets, bit-identical results on
every rank, Sum/Average/prescale/postscale/predivide semantics, warm-up, NaN/Inf, empty/tiny/
integer/float16/float64 tensors, refused ops, compress() reached in a different order on each
rank (as backward hooks do), hvd.DistributedOptimizer fused and per tensor, the optimizer's
state_dict, the config check. Any failure raises, so the exit code is the verdict.
"""
from __future__ import annotations

import hashlib
import os
import sys

import horovod.torch as hvd
import torch

import horovod_q8.torch as q8t
from horovod_q8.torch import ConfigMismatchError, compressor, horovod_api
from horovod_q8.torch.names import with_names
from horovod_q8.torch.optimizer import STATE_KEY

hvd.init()
torch.set_num_threads(1)
N, RANK = hvd.size(), hvd.rank()
BUDGET = {"q8": 0.03, "q8_dynamic_tree": 0.03, "q8_linear": 0.03, "q8_mantissa": 0.04,
          "q8_static_tree": 0.1, "q4": 0.3}
SHAPES = [(3, 3, 16, 33), (1025, 7), (4099,), (10001,)]
_names = iter(range(10 ** 6))


def name() -> str:
    return f"t{next(_names)}"  # the same sequence on every rank


def same_on_all_ranks(t: torch.Tensor) -> bool:
    t = t.detach().contiguous()
    raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t  # NumPy has no bfloat16
    digest = hashlib.sha1(raw.numpy().tobytes()).hexdigest()
    return len(set(hvd.allgather_object(digest, name=name()))) == 1


def rank_data(shape, seed=0, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + RANK)
    return torch.randn(*shape, generator=g).to(dtype)


def rel_err(y, ref) -> float:
    y, ref = y.double(), ref.double()
    return float((y - ref).abs().mean() / ref.abs().mean())


def exact(x, **kw):
    return hvd.allreduce(x, name=name(), **kw)


def check_codebook(fmt: str) -> None:
    comp = compressor(fmt)
    for i, shape in enumerate(SHAPES):
        x = rank_data(shape, i)
        y = hvd.allreduce(x, compression=comp, op=hvd.Average, name=name())
        assert y.shape == x.shape and y.dtype == x.dtype
        assert rel_err(y, exact(x, op=hvd.Average)) < BUDGET[fmt], (fmt, shape)
        assert same_on_all_ranks(y), (fmt, shape)
        y_sum = hvd.allreduce(x, compression=comp, op=hvd.Sum, name=name())
        torch.testing.assert_close(y_sum, N * y, rtol=1e-5, atol=1e-6)
        y_scaled = hvd.allreduce(x, compression=comp, op=hvd.Average, prescale_factor=0.5,
                                 postscale_factor=3.0, name=name())
        torch.testing.assert_close(y_scaled, 1.5 * y, rtol=1e-5, atol=1e-6)
        y_unnamed = hvd.allreduce(x, compression=comp, op=hvd.Average)  # numbered in call order
        assert torch.equal(y_unnamed, y)
    warm = compressor(fmt, warmup_steps=2)
    x = rank_data((5000,), 9)
    for step in range(3):
        y = hvd.allreduce(x, compression=warm, op=hvd.Average, name="warm")
        if step < 2:  # warm-up steps are Horovod's exact allreduce
            torch.testing.assert_close(y, exact(x, op=hvd.Average), rtol=1e-6, atol=1e-7)
        else:
            assert 0 < rel_err(y, exact(x, op=hvd.Average)) < BUDGET[fmt]
    print(f"{fmt}: budget, identical bits, Sum/Average/prescale/postscale, warm-up ok", flush=True)


def check_threshold(fmt: str) -> None:
    """Error feedback keyed by the tensor's name: the running mean converges to the exact one."""
    comp = compressor(fmt, threshold=0.05)
    x = rank_data((64, 65), 7) * 0.01
    ref = exact(x, op=hvd.Average)
    total = torch.zeros_like(ref, dtype=torch.float64)
    for _ in range(150):
        y = hvd.allreduce(x, compression=comp, op=hvd.Average, name="feedback")
        assert same_on_all_ranks(y), fmt
        total += y.double()
    err = rel_err(total / 150, ref)
    assert err < 0.1, (fmt, err)
    print(f"{fmt}: error feedback converges (rel err of the mean {err:.3f}), identical bits", flush=True)


def check_edges(fmt: str) -> None:
    comp = compressor(fmt, min_size=0)
    for shape in [(0,), (1,), (5,)]:
        x = rank_data(shape)
        y = hvd.allreduce(x, compression=comp, op=hvd.Average, name=name())
        assert y.shape == x.shape
        if shape[0]:
            assert torch.isfinite(y).all() and same_on_all_ranks(y)
    ints = torch.arange(10, dtype=torch.int32) + RANK
    assert torch.equal(hvd.allreduce(ints, compression=compressor(fmt), op=hvd.Sum, name=name()),
                       exact(ints, op=hvd.Sum))
    small = rank_data((100,))  # below min_size: Horovod's own exact path
    assert torch.equal(hvd.allreduce(small, compression=compressor(fmt), op=hvd.Average, name="small"),
                       hvd.allreduce(small, op=hvd.Average, name="small.exact"))
    for dtype in (torch.float16, torch.float64):
        x = rank_data((2000,), 3, dtype)
        y = hvd.allreduce(x, compression=compressor(fmt), op=hvd.Average, name=name())
        assert y.dtype == dtype and same_on_all_ranks(y.float())
    x = rank_data((5000,), 4)
    if RANK == 0:
        x[5] = float("nan")
    if RANK == N - 1:
        x[4000] = float("inf")
    y = hvd.allreduce(x, compression=compressor(fmt), op=hvd.Average, name=name())
    assert not torch.isfinite(y[5]) and not torch.isfinite(y[4000]), fmt
    assert torch.isfinite(y[2048:3000]).all(), fmt
    for op in (hvd.Max, hvd.Min, hvd.Product):
        try:
            hvd.allreduce(rank_data((5000,)), compression=compressor(fmt), op=op, name=name())
        except ValueError as e:
            assert "supports op=hvd.Average and op=hvd.Sum" in str(e), e  # refused before Horovod runs
        else:
            raise AssertionError(f"{fmt}: op {op} was not refused")
    print(f"{fmt}: empty/one/ints/small/fp16/fp64/NaN/Inf/refused ops ok", flush=True)


def check_any_order(fmt: str) -> None:
    """compress() and decompress() reached in a different order on every rank (as Horovod's
    backward hooks and synchronize() reach them): no hang, the same bits as in call order."""
    comp = compressor(fmt)
    xs = [rank_data(s, 30 + i) for i, s in enumerate(SHAPES)]
    names = [f"order.{i}" for i in range(len(xs))]
    in_order = [hvd.allreduce(x, compression=comp, name=f"{n}.ref") for x, n in zip(xs, names)]
    order = list(range(len(xs)))
    order = order[RANK % len(order):] + order[:RANK % len(order)]
    if RANK % 2:
        order.reverse()
    pending = {}
    comp = comp.fresh()  # the same residuals (none yet) as the in-order round had
    for i in order:
        control, ctx = with_names([f"{names[i]}.ref"], comp.compress, xs[i])
        pending[i] = (hvd.allreduce_async_(control, name=f"{names[i]}.control", op=hvd.Average), ctx)
    for i in reversed(order):
        handle, ctx = pending[i]
        y = comp.decompress(hvd.synchronize(handle), ctx)
        assert torch.equal(y, in_order[i]), (fmt, i)
    print(f"{fmt}: compress/decompress in rank-dependent orders ok", flush=True)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3)
        self.fc1 = torch.nn.Linear(8 * 6 * 6, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.relu(self.conv(x)).flatten(1))))


def train(comp, steps=6, fused=True, predivide=1.0, reversed_on=None, **kw):
    """reversed_on: the rank that lists named_parameters in reverse order."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.environ["HOROVOD_Q8_FUSED"] = "1" if fused else "0"
    named = list(model.named_parameters())
    opt = hvd.DistributedOptimizer(opt, named_parameters=named[::-1] if RANK == reversed_on else named,
                                   compression=comp, gradient_predivide_factor=predivide, **kw)
    g = torch.Generator().manual_seed(100 + RANK)
    for _ in range(steps):
        x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return weights(model), opt, model


def weights(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def one_step(model, opt, seed: int) -> None:
    g = torch.Generator().manual_seed(seed + RANK)
    x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def check_optimizer(fmt: str) -> None:
    plain, _, _ = train(hvd.Compression.none)
    for fused in (True, False):
        for predivide in (1.0, 2.0):
            w, opt, _ = train(compressor(fmt, min_size=64), fused=fused, predivide=predivide)
            assert (STATE_KEY in opt.state_dict()) == fused, fused
            assert same_on_all_ranks(w), (fmt, fused, predivide)
            assert 0 < rel_err(w, plain) < 0.05, (fmt, fused, rel_err(w, plain))
    for fused in ("1", "0"):
        os.environ["HOROVOD_Q8_FUSED"] = fused
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(Net().parameters(), lr=0.1), compression=compressor(fmt),
                                     op=hvd.Adasum)
        except ValueError as e:
            assert "Adasum" in str(e), e
        else:
            raise AssertionError(f"Adasum was accepted (HOROVOD_Q8_FUSED={fused})")
    os.environ["HOROVOD_Q8_FUSED"] = "1"
    for op in (hvd.Adasum, hvd.Max, hvd.Min, hvd.Product):  # per tensor: ours, before Horovod's own refusal
        for reduce in (hvd.allreduce, lambda t, **kw: hvd.grouped_allreduce([t], **kw)):
            try:
                reduce(torch.ones(4), name="refused_op", compression=compressor(fmt), op=op)
            except ValueError as e:
                assert "supports op=hvd.Average and op=hvd.Sum" in str(e), e
            else:
                raise AssertionError(f"op {op} was accepted by hvd.allreduce")
    check_steps_independent(fmt)
    check_dtypes(fmt)
    print(f"{fmt}: hvd.DistributedOptimizer fused and per tensor, predivide, identical weights ok", flush=True)


def averaged_grads(opt, params, grads) -> torch.Tensor:
    """One synchronize() of the given gradients (set, not computed): the averages it wrote."""
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.synchronize()
    out = torch.cat([p.grad.reshape(-1).clone() for p in params])
    with opt.skip_synchronize():
        opt.step()
    return out


SMALL_BUCKETS = [(3000,), (50, 40), (7,), (2500,), (33, 33)]  # several buckets of fusion_bytes=16000


def small_buckets(comp):
    """Parameters of SMALL_BUCKETS and horovod_q8's fused optimizer over them (lr 0)."""
    params = [torch.nn.Parameter(torch.zeros(s)) for s in SMALL_BUCKETS]
    opt = q8t.DistributedOptimizer(torch.optim.SGD(params, lr=0.0), compression=comp, fusion_bytes=4 * 4000,
                                   named_parameters=[(f"p{i}", p) for i, p in enumerate(params)])
    return params, opt


def check_steps_independent(fmt: str) -> None:
    """The fused optimizer reuses its buffers step after step (codes, sums, results): a step's
    averages are those a fresh optimizer computes from the same gradients, bit for bit, after
    steps of other sizes and magnitudes (several buckets; codebook formats keep no residual)."""
    if fmt not in BUDGET:
        return
    comp = compressor(fmt, min_size=64)
    steps = [[rank_data(s, 50 + 10 * k + i) * 10.0 ** (k - 1) for i, s in enumerate(SMALL_BUCKETS)]
             for k in range(3)]
    params, opt = small_buckets(comp)
    assert len(opt._q8.buckets) > 1
    outs = [averaged_grads(opt, params, g) for g in steps]
    for k, g in enumerate(steps):
        alone_params, alone_opt = small_buckets(comp)
        alone = averaged_grads(alone_opt, alone_params, g)
        assert torch.equal(outs[k], alone), (fmt, k)
        assert same_on_all_ranks(outs[k]), (fmt, k)
        assert rel_err(outs[k], exact(torch.cat([x.reshape(-1) for x in g]), op=hvd.Average)) < BUDGET[fmt]


def check_dtypes(fmt: str) -> None:
    """A model of float64 and float32 parameters: each bucket holds one dtype; a bucket sent
    plain (under min_size) is summed in its own dtype, as Horovod's average is, and a
    compressed float64 bucket keeps its dtype within the format's budget."""
    shapes, dtypes = [(3000,), (50, 40), (7,), (33, 33)], [torch.float64, torch.float32, torch.float64, torch.float32]
    grads = [rank_data(s, 70 + i, d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    for min_size, compressed in ((10 ** 6, False), (64, True)):
        if compressed and fmt not in BUDGET:
            continue
        params = [torch.nn.Parameter(torch.zeros(s, dtype=d)) for s, d in zip(shapes, dtypes)]
        opt = q8t.DistributedOptimizer(torch.optim.SGD(params, lr=0.0), compression=compressor(fmt, min_size=min_size),
                                       named_parameters=[(f"p{i}", p) for i, p in enumerate(params)])
        assert all(len({p.dtype for p in b.params}) == 1 for b in opt._q8.buckets), fmt
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.synchronize()
        with opt.skip_synchronize():
            opt.step()
        for p, g in zip(params, grads):
            assert p.grad.dtype == g.dtype and same_on_all_ranks(p.grad), (fmt, p.grad.dtype)
            ref = exact(g, op=hvd.Average)
            if compressed:
                assert rel_err(p.grad, ref) < BUDGET[fmt], (fmt, g.dtype, rel_err(p.grad, ref))
            else:  # the ring adds a bucket's elements in another order than a tensor's alone at 3 ranks
                tol = 1e-13 if g.dtype == torch.float64 else 1e-6  # a float32 sum of float64: ~1e-8
                assert rel_err(p.grad, ref) < tol, (fmt, g.dtype, rel_err(p.grad, ref))


def check_bfloat16(fmt: str) -> None:
    """bfloat16 gradients, which Horovod 0.28.1's allreduce refuses: wherever horovod_q8 sends
    them plain (under min_size, warm-up, Auto's none, the fused optimizer's plain buckets) they go
    as float32; compressed, they are quantized as float32; back as bfloat16, the same on every rank."""
    g = rank_data((3000,), 90, torch.bfloat16)
    ref = exact(g.float(), op=hvd.Average)
    comps = {"plain": compressor(fmt, min_size=10 ** 6), "warm-up": compressor(fmt, warmup_steps=1),
             "compressed": compressor(fmt, min_size=64), "auto": compressor("auto", allow=("none",), min_size=64)}
    for case, comp in comps.items():
        y = hvd.allreduce(g, compression=comp, op=hvd.Average, name=f"bf16.{fmt}.{case}")
        assert y.dtype == torch.bfloat16 and y.shape == g.shape and same_on_all_ranks(y), (fmt, case)
        if case == "compressed":  # exactly float32's codes: bfloat16 -> float32 is exact
            y32 = hvd.allreduce(g.float(), compression=compressor(fmt, min_size=64), op=hvd.Average,
                                name=f"bf16.{fmt}.as_float32")
            assert torch.equal(y, y32.to(torch.bfloat16)), fmt
        if case != "compressed" or fmt in BUDGET:  # a threshold format's one step sends a part only
            budget = BUDGET.get(fmt, 0) + 0.01  # bfloat16's 8 bits: about 0.2%
            assert rel_err(y, ref) < budget, (fmt, case, rel_err(y, ref))
    for min_size in (10 ** 6, 64):
        torch.manual_seed(0)  # the same weights on every rank
        model = torch.nn.Linear(60, 50).to(torch.bfloat16)
        opt = q8t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), compression=compressor(fmt, min_size=min_size),
                                       named_parameters=model.named_parameters())
        torch.manual_seed(RANK)
        model(torch.randn(8, 60).to(torch.bfloat16)).float().square().sum().backward()
        opt.step()
        for p in model.parameters():
            assert p.dtype == torch.bfloat16 and same_on_all_ranks(p.detach()), (fmt, min_size)
    print(f"{fmt}: bfloat16 plain, warm-up, compressed, Auto and fused ok", flush=True)


def check_two_optimizers(fmt: str) -> None:
    """Two fused optimizers over one backward, each rank skipping another layer each step (its
    gradients stay None): the buckets its hooks start differ by rank, and each optimizer's
    step() sends only its own second round (at 3 ranks the first optimizer's used to wait on
    the second's alltoalls, which other ranks start only in its own step: a hang)."""
    torch.manual_seed(0)
    nets = [torch.nn.ModuleList([torch.nn.Linear(30, 30) for _ in range(4)]) for _ in range(2)]
    opts = [q8t.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), compression=compressor(fmt, min_size=64),
                                     fusion_bytes=4 * 1000, named_parameters=[(f"n{k}.{n}", p) for n, p in net.named_parameters()])
            for k, net in enumerate(nets)]
    assert all(len(o._q8.buckets) >= 4 for o in opts)  # one per layer at least (q4_threshold: per group)
    g = torch.Generator().manual_seed(200 + RANK)
    for step in range(3):
        x = torch.randn(8, 30, generator=g)
        for o in opts:
            o.zero_grad()
        loss = torch.zeros(())
        for net in nets:
            h = x
            for i, layer in enumerate(net):
                if i != (RANK + step) % len(net):
                    h = torch.relu(layer(h))
            loss = loss + h.pow(2).mean()
        loss.backward()
        for o in opts:
            o.step()
    for net in nets:
        assert same_on_all_ranks(torch.cat([p.detach().reshape(-1) for p in net.parameters()])), fmt
    print(f"{fmt}: two fused optimizers over one backward, unused parameters by rank ok", flush=True)


def check_state_dict(fmt: str) -> None:
    """The fused optimizer's residuals and steps travel in its state_dict: an optimizer restored
    from it takes the next step exactly as the uninterrupted one, one without them does not."""
    comp = compressor(fmt, min_size=64, error_feedback=True)
    _, a, model_a = train(comp, steps=3)
    saved = a.state_dict()
    assert saved[STATE_KEY]["residuals"], "no residuals saved"
    results = []
    for with_ours in (True, False):
        model = Net()
        model.load_state_dict(model_a.state_dict())
        b = q8t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters(), compression=comp.fresh())
        b.load_state_dict(saved if with_ours else {k: v for k, v in saved.items() if k != STATE_KEY})
        one_step(model, b, 77)
        results.append(weights(model))
    one_step(model_a, a, 77)
    assert torch.equal(results[0], weights(model_a)), fmt
    assert not torch.equal(results[1], weights(model_a)), fmt  # the residuals mattered
    print(f"{fmt}: optimizer state_dict carries residuals and steps ok", flush=True)


def check_config_mismatch(fmt: str) -> None:
    comp = compressor(fmt, min_size=1024 if RANK == 0 else 512)
    try:
        hvd.allreduce(rank_data((5000,)), compression=comp, name="mismatch")
    except ConfigMismatchError as e:
        assert "min_size=" in str(e), e
    else:
        raise AssertionError("different settings were not detected")
    print(f"{fmt}: mismatched settings detected on rank {RANK}", flush=True)


def check_auto(fmt: str) -> None:
    """compression=Auto (fmt: the formats it may choose, "+"-separated): each tensor exactly as
    its chosen compressor gives it, identical ranks, the stock optimizer, a restored plan."""
    from horovod_q8.collective.auto import AutoState
    from horovod_q8.torch import hvd_agreement

    comp = compressor("auto", allow=tuple(fmt.split("+")))
    for i, shape in enumerate([(100,), *SHAPES, (300_000,)]):
        x = rank_data(shape, 40 + i)
        y = hvd.allreduce(x, compression=comp, op=hvd.Average, name=name())
        assert same_on_all_ranks(y), shape
        chosen = comp.plan().choose(x.numel()).name
        fixed = comp.compressor_for(chosen)
        assert torch.equal(y, hvd.allreduce(x, compression=fixed, op=hvd.Average, name=name())), (shape, chosen)
    w, opt, _ = train(comp)
    assert STATE_KEY in opt.state_dict(), "hvd.DistributedOptimizer did not build the fused optimizer for Auto"
    assert same_on_all_ranks(w)
    check_auto_buckets(comp)
    restored = AutoState(comp.auto_state.auto)
    restored.load_state_dict(comp.state_dict())
    from horovod_q8.torch.auto import horovod_probe  # its gather takes rank 0's calibration; nothing is measured
    plan = restored.ensure(lambda: horovod_probe(comp.compressors), lambda st, label: hvd_agreement.agree(st, label))
    assert plan.restored and plan.fingerprint() == comp.plan().fingerprint()
    print(f"auto ({fmt}): chose {[c.name for _, _, c in plan.classes()]}, identical to the fixed ones ok",
          flush=True)


def check_auto_buckets(comp) -> None:
    """The fused optimizer with Auto: each bucket exactly as the fused optimizer of the compressor
    Auto chose for it gives it (Horovod's none and fp16: the exact average, to fp16's rounding),
    identical ranks, and the choices restored from its state_dict."""
    grads = [rank_data(s, 70 + i) for i, s in enumerate(SMALL_BUCKETS)]
    params, opt = small_buckets(comp)
    got = averaged_grads(opt, params, grads)
    assert same_on_all_ranks(got)
    buckets, chosen = opt._q8.buckets, opt._q8.chosen[1]
    exact_avg = exact(torch.cat([g.reshape(-1) for g in grads]), op=hvd.Average)
    for c in {id(c): c for c in chosen if isinstance(c, q8t.Q8Compressor)}.values():
        fixed_params, fixed_opt = small_buckets(c)
        want = averaged_grads(fixed_opt, fixed_params, grads)
        for b in buckets:
            if chosen[b.index] is c:
                lo = sum(x.n for x in buckets[: b.index])
                assert torch.equal(got[lo: lo + b.n], want[lo: lo + b.n]), (c.name, b.index)
    for b in buckets:
        lo = sum(x.n for x in buckets[: b.index])
        if not isinstance(chosen[b.index], q8t.Q8Compressor):
            tol = 1e-6 if chosen[b.index] is hvd.Compression.none else 2e-3
            assert rel_err(got[lo: lo + b.n], exact_avg[lo: lo + b.n]) < tol, (chosen[b.index], b.index)
    again_params, again = small_buckets(comp)
    again.load_state_dict(opt.state_dict())
    assert torch.equal(averaged_grads(again, again_params, grads), got)
    names = [c.name if isinstance(c, q8t.Q8Compressor) else "none" if c is hvd.Compression.none else "fp16"
             for c in chosen]
    print(f"auto fused optimizer: buckets chose {names}, each as its compressor ok", flush=True)


def check_resume(fmt: str) -> None:
    """Horovod's resume (its examples): rank 0 alone loads the checkpoint, then
    hvd.broadcast_optimizer_state and broadcast_parameters. With a warm-up shorter than the
    steps taken, rank 0's restored step count is past it and the others' is 0: the ranks agree
    (no hang, every bucket through the same collectives) and end with identical weights. Also:
    zero_grad() between backward and step() is refused with a sentence, named_parameters must
    be (name, parameter) pairs, a non-global process_set is refused, and a bucket whose padded
    slots would make two pieces (pipeline_elements) goes as pieces."""
    comp = compressor(fmt, min_size=64, warmup_steps=2)
    _, a, model_a = train(comp, steps=4)
    saved = a.state_dict() if RANK == 0 else None
    model = Net()
    opt = q8t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters(), compression=comp.fresh())
    if RANK == 0:
        model.load_state_dict(model_a.state_dict())
        opt.load_state_dict(saved)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for seed in (81, 82):
        one_step(model, opt, seed)
    assert same_on_all_ranks(weights(model)), fmt
    steps = opt.state_dict()[STATE_KEY]["residuals"]["cpu"]["steps"]
    assert set(steps.values()) == {6}, steps  # 4 restored on every rank, then 2
    g = torch.Generator().manual_seed(5 + RANK)
    x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    try:
        opt.zero_grad()
    except AssertionError as e:
        assert "zero_grad() was called after loss.backward()" in str(e), e
    else:
        raise AssertionError("zero_grad() between backward and step() was accepted")
    opt.step()
    try:
        q8t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.parameters(),
                                 compression=comp.fresh())
    except ValueError as e:
        assert "tuples (name, parameter)" in str(e), e
    else:
        raise AssertionError("named_parameters=model.parameters() was accepted")
    for fused in ("0", "1"):  # a process set other than the global one: a sentence, before any collective
        os.environ["HOROVOD_Q8_FUSED"] = fused
        for call in (lambda: hvd.allreduce(rank_data((5000,)), compression=comp, process_set=hvd.ProcessSet([0])),
                     lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), compression=comp,
                                                      named_parameters=model.named_parameters(),
                                                      process_set=hvd.ProcessSet([0]))):
            try:
                call()
            except ValueError as e:
                assert "process_set" in str(e), e
            else:
                raise AssertionError(f"a non-global process_set was accepted (HOROVOD_Q8_FUSED={fused})")
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (524_289, 520_287, 3000)]
    piece = compressor(fmt, pipeline_elements=1 << 20)
    opt = q8t.DistributedOptimizer(torch.optim.SGD(params, lr=0.0), compression=piece,
                                   named_parameters=[(f"p{i}", p) for i, p in enumerate(params)])
    grads = [rank_data((p.numel(),), 90 + i) for i, p in enumerate(params)]
    got = averaged_grads(opt, params, grads)
    assert same_on_all_ranks(got) and rel_err(got, exact(torch.cat(grads), op=hvd.Average)) < BUDGET[fmt], fmt
    print(f"{fmt}: resumed from rank 0 with broadcast_optimizer_state, zero_grad refused, pieces ok", flush=True)


def check_parameter_order(fmt: str) -> None:
    """named_parameters in another order on one rank: Horovod's own optimizer matches gradients by
    name, so with horovod_q8 imported it still trains; the fused one buckets in rank 0's order."""
    plain, _, _ = train(hvd.Compression.none)
    for comp in (hvd.Compression.none, hvd.Compression.fp16, compressor(fmt, min_size=64)):
        w, _, _ = train(comp, reversed_on=1)
        assert same_on_all_ranks(w), comp
        w_same, _, _ = train(comp)
        assert torch.equal(w, w_same), comp  # the same sums as with the same order everywhere
    print(f"{fmt}: named_parameters in another order on rank 1 ok", flush=True)


CHECKS = {"auto": check_auto, "codebook": check_codebook, "threshold": check_threshold, "edges": check_edges,
          "any_order": check_any_order, "optimizer": check_optimizer, "state_dict": check_state_dict,
          "config_mismatch": check_config_mismatch, "resume": check_resume, "dtypes": check_dtypes, "bfloat16": check_bfloat16,
          "two_optimizers": check_two_optimizers, "parameter_order": check_parameter_order}


def main() -> None:
    assert q8t.HOROVOD and horovod_api.installed(), "horovod_q8 did not wrap horovod.torch"
    fmts = sys.argv[1].split(",")
    for check in sys.argv[2:] or ["codebook", "threshold", "edges", "any_order", "optimizer", "state_dict"]:
        for fmt in fmts:
            if check == "codebook" and fmt not in BUDGET or check == "threshold" and fmt in BUDGET:
                continue
            CHECKS[check](fmt)
    if RANK == 0:
        print("OK", flush=True)


if __name__ == "__main__":
    main()
