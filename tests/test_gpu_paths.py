"""The engine's N-rank schedule on CuPy arrays gives NumPy's bits (on a GPU, or on the CUDA host
build); on a GPU only: torch CUDA tensors reach the kernels through DLPack without a copy, on
torch's current stream, and the DDP hook runs on NCCL."""
from __future__ import annotations

import numpy as np
import pytest

from horovod_q8.collective import engine
from horovod_q8.collective.threads import run_ranks
from horovod_q8.formats import get

pytestmark = pytest.mark.gpu
FORMATS = ["q8", "q8_linear", "q8_mantissa", "q8_static_tree", "q4"]


def _sums(xs, req, stores=None):
    return run_ranks(len(xs), lambda t: engine.compressed_sum(
        t, req, xs[t.rank], None if stores is None else stores[t.rank]))


@pytest.mark.parametrize("n_ranks", [2, 3, 4])
@pytest.mark.parametrize("schedule", ["two_phase", "allgather"])
def test_engine_on_cupy_gives_numpys_bits(cp, n_ranks, schedule):
    rng = np.random.default_rng(n_ranks)
    for name in FORMATS + ["q8_stochastic"]:
        fmt = get("q8", rounding="stochastic", seed=5) if name == "q8_stochastic" else get(name)
        for n in (9, 4099, 300_001):
            xs = [rng.standard_normal(n).astype(np.float32) for _ in range(n_ranks)]
            xs[0][n // 2] = np.nan
            xs[1][: min(n, 3000)] *= np.float32(2.0 ** -130)  # subnormal values and block scales
            req = engine.Request(fmt, n, schedule, piece_elements=65536)
            ref = _sums(xs, req)
            got = _sums([cp.asarray(x) for x in xs], req)
            for g in got:
                assert np.array_equal(ref[0], cp.asnumpy(g), equal_nan=True), (name, n)


@pytest.mark.parametrize("name", ["twobit", "q4_threshold"])
def test_threshold_residuals_on_cupy_match_numpy(cp, name):
    from horovod_q8.collective.transport import ArrayResiduals

    n, n_ranks = 50_000, 3
    fmt = get(name).for_group("dense")
    rng = np.random.default_rng(0)
    xs = [(0.003 * rng.standard_normal(n)).astype(np.float32) for _ in range(n_ranks)]
    req = engine.Request(fmt, n, "two_phase", key="g")
    host, dev = [ArrayResiduals() for _ in xs], [ArrayResiduals(cp) for _ in xs]
    for _ in range(3):
        a, b = _sums(xs, req, host), _sums([cp.asarray(x) for x in xs], req, dev)
        assert all(np.array_equal(x, cp.asnumpy(y)) for x, y in zip(a, b))


def test_torch_cuda_tensors_reach_the_kernels_without_copies(real_cp):
    cp = real_cp
    torch = pytest.importorskip("torch")
    from horovod_q8.torch.state import TorchResiduals
    from horovod_q8.torch.tensors import TensorBuffers, as_array, as_tensor, kernel_stream

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.randn(1 << 20, device="cuda")
        with kernel_stream(t.device):
            assert cp.cuda.get_current_stream().ptr == side.cuda_stream  # ordered after t's producer
            a = as_array(t)
            assert a.data.ptr == t.data_ptr() and a.dtype == cp.float32
            assert as_tensor(a).data_ptr() == t.data_ptr()
            r = TorchResiduals("cuda")
            assert r.residual("k", 100).data.ptr == r.tensors["k"].data_ptr()
            b = TensorBuffers(t.device)
            buf = b("x", 1000, np.uint8)
            assert buf.data.ptr == b._buffers[("x", 1000, np.dtype(np.uint8).str)][0].data_ptr()
    side.synchronize()  # the ranks below are threads, each on its own CuPy stream
    req = engine.Request(get("q8"), t.numel(), "two_phase")
    ref = _sums([t.cpu().numpy()] * 3, req)
    got = _sums([as_array(t)] * 3, req)
    assert all(np.array_equal(ref[0], cp.asnumpy(g)) for g in got)


def test_ddp_path_on_one_nccl_rank(real_cp):
    """The DDP hook's transport on CUDA: all_to_all_single and all_gather_into_tensor of uint8
    on NCCL, buffers from torch's allocator, kernels on torch's stream (one rank: one GPU)."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from horovod_q8.torch.ddp import Q8HookState, compressed_sum

    if not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)  # FileStore: pytorch#31467
    try:
        for schedule in ("two_phase", "allgather"):
            state = Q8HookState("q8", min_size=0, schedule=schedule)
            x = torch.randn(300_001, device="cuda")
            total = compressed_sum(state, x, f"gpu.{schedule}", "other")
            assert total.device.type == "cuda"
            ref = _sums([x.cpu().numpy()], engine.Request(get("q8"), x.numel(), schedule))
            assert np.array_equal(ref[0], total.cpu().numpy()), schedule
    finally:
        dist.destroy_process_group()


def test_auto_calibrates_the_codec_on_the_gradients_gpu(real_cp):
    """Auto's torch probe over CUDA tensors (horovod.torch's and the DDP hook's, on the gradients'
    device) times CuPy's kernels, not the CPU's: q8 encodes faster there than on this host."""
    torch = pytest.importorskip("torch")
    from horovod_q8.collective.auto import codec_rates
    from horovod_q8.torch.auto import _tensor_probe

    n = 1 << 22
    probes = {d: _tensor_probe(2, None, None, None, torch.device(d)) for d in ("cuda", "cpu")}
    assert probes["cuda"].xp is real_cp
    rates = {d: dict((r[0], r[1:]) for r in codec_rates(["q8", "fp16"], p.fp16_roundtrip, n, p.xp, p.sync))
             for d, p in probes.items()}
    assert rates["cuda"]["q8"][0] > rates["cpu"]["q8"][0], rates
