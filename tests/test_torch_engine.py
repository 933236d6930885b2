"""The engine on torch tensors, N ranks in-process: the same bits as on NumPy arrays, no copies,
residuals owned by a torch state and restored from its state_dict."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from horovod_q8.collective import engine, policy  # noqa: E402
from horovod_q8.collective.threads import run_ranks  # noqa: E402
from horovod_q8.collective.transport import ArrayResiduals  # noqa: E402
from horovod_q8.formats import get  # noqa: E402
from horovod_q8.torch.common import make_setting, seed_for  # noqa: E402
from horovod_q8.torch.ddp import layout  # noqa: E402
from horovod_q8.torch.state import TorchResiduals  # noqa: E402
from horovod_q8.torch.tensors import TensorBuffers, as_array, as_tensor  # noqa: E402

FORMATS = ["q8", "q8_linear", "q8_mantissa", "q8_static_tree", "q4"]


def sums(xs, req, stores=None, seeds=lambda k: k):
    return run_ranks(len(xs), lambda t: np.array(engine.compressed_sum(
        t, req, xs[t.rank], None if stores is None else stores[t.rank], seeds)))


def test_views_share_memory():
    t = torch.randn(1000)
    a = as_array(t)
    assert a.ctypes.data == t.data_ptr() and a.dtype == np.float32
    back = as_tensor(a)
    assert back.data_ptr() == t.data_ptr()
    a[3] = 42.0
    assert float(t[3]) == 42.0
    with pytest.raises(ValueError, match="contiguous"):
        as_array(torch.randn(10, 10).t())


def test_buffers_are_reused_torch_memory():
    b = TensorBuffers(torch.device("cpu"))
    x = b("k", 100, np.uint8)
    assert b("k", 100, np.uint8) is x and b("k", 101, np.uint8) is not x
    assert b.nbytes() == 201


@pytest.mark.parametrize("n_ranks", [2, 3, 5])
@pytest.mark.parametrize("schedule", ["two_phase", "allgather"])
def test_torch_views_give_numpys_bits(n_ranks, schedule):
    rng = np.random.default_rng(n_ranks)
    for name in FORMATS + ["q8_stochastic"]:
        fmt = get("q8", rounding="stochastic", seed=5) if name == "q8_stochastic" else get(name)
        for n in (9, 4099, 20_001):
            xs = [rng.standard_normal(n).astype(np.float32) for _ in range(n_ranks)]
            req = engine.Request(fmt, n, schedule, piece_elements=2048)
            ref = sums(xs, req)
            tensors = [torch.from_numpy(x.copy()) for x in xs]
            got = sums([as_array(t) for t in tensors], req)
            assert all(np.array_equal(ref[0], g) for g in got), (name, n)
            assert all(np.array_equal(ref[0], r) for r in ref)
            assert all(np.array_equal(t.numpy(), x) for t, x in zip(tensors, xs))  # inputs untouched


@pytest.mark.parametrize("name", ["twobit", "q4_threshold"])
def test_torch_residuals_match_numpy_residuals_and_restore(name):
    """Error feedback with residuals in torch tensors: the bits of NumPy-owned residuals,
    and a state restored from state_dict continues exactly where the saved one was."""
    n, n_ranks = 5000, 3
    fmt = get(name).for_group("dense")
    rng = np.random.default_rng(0)
    xs = [(0.003 * rng.standard_normal(n)).astype(np.float32) for _ in range(n_ranks)]
    req = engine.Request(fmt, n, "two_phase", key="g")
    numpy_stores = [ArrayResiduals() for _ in range(n_ranks)]
    torch_stores = [TorchResiduals() for _ in range(n_ranks)]
    for _ in range(3):
        a, b = sums(xs, req, numpy_stores), sums(xs, req, torch_stores)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert any(np.any(t.numpy() != 0) for s in torch_stores for t in s.tensors.values())
    restored = []
    for s in torch_stores:
        r = TorchResiduals()
        r.load_state_dict(s.state_dict())
        restored.append(r)
    a, b = sums(xs, req, torch_stores), sums(xs, req, restored)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_half_precision_through_a_float32_copy():
    n_ranks, n = 3, 3000
    rng = np.random.default_rng(1)
    xs = [torch.from_numpy(rng.standard_normal(n).astype(np.float32)).half() for _ in range(n_ranks)]
    req = engine.Request(get("q8"), n)
    got = sums([as_array(x.float()) for x in xs], req)
    exact = np.sum([x.float().numpy() for x in xs], axis=0)
    assert np.abs(got[0] - exact).mean() < 0.03 * np.abs(exact).mean()


def test_seeds_differ_per_step_piece_and_rank():
    seeds = {seed_for(0, k, s, r) for k in range(3) for s in range(3) for r in range(3)}
    assert len(seeds) == 27 and all(0 <= s < 2 ** 32 for s in seeds)


def test_settings_by_name_and_refused_options():
    s = make_setting("q8", block_size=256, min_size=10, warmup_steps=3)
    assert s.format.block_size == 256 and s.min_size == 10 and s.warmup_steps == 3
    assert make_setting(s) is s
    with pytest.raises(ValueError, match="threshold"):
        make_setting("q8", threshold=0.1)
    with pytest.raises(ValueError, match="Setting"):
        make_setting(s, min_size=3)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['blocksize'\] for 'q8'; options: block_size, "):
        make_setting("q8", blocksize=256)


def test_layout_merges_consecutive_groups():
    got = layout([10, 5, 7, 3, 4], ["dense", "other", "dense", "dense", "other"])
    assert list(got.items()) == [("dense", [(0, 10), (15, 25)]), ("other", [(10, 15), (25, 29)])]
    assert policy.decide(make_setting("q8"), True, 2000, 3).compress


def test_ddp_hook_refuses_what_is_not_a_ddp_bucket():
    """FSDP calls a registered hook with a gradient tensor: a sentence, not an AttributeError."""
    from horovod_q8.torch.ddp import Q8HookState, ddp_hook

    with pytest.raises(TypeError, match="DistributedDataParallel communication hook.*FSDP"):
        ddp_hook(Q8HookState("q8"), torch.zeros(3))


def test_hook_state_loads_what_the_same_setting_saved():
    """A hook state saved with error_feedback spelled None loads under the setting it meant;
    another setting's state is refused with a sentence."""
    from horovod_q8.torch.ddp import Q8HookState

    for name in ("q8", "twobit"):
        saved = Q8HookState(name).state_dict()
        old = dict(saved, setting=dict(saved["setting"], error_feedback=None))  # as saved before None was resolved
        for state in (saved, old):
            Q8HookState(name, error_feedback=name == "twobit").load_state_dict(state)
    with pytest.raises(ValueError, match="saved with another compression setting"):
        Q8HookState("q8", error_feedback=True).load_state_dict(old)
