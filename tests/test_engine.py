"""The engine on N in-process ranks (`collective.threads`): the numerics of every schedule
without horovodrun, in the fast lane. horovodrun tests keep what only real Horovod shows."""
from __future__ import annotations

import numpy as np
import pytest

from horovod_q8.collective import engine, policy
from horovod_q8.collective.setting import Setting
from horovod_q8.collective.threads import run_ranks
from horovod_q8.collective.transport import ArrayResiduals
from horovod_q8.formats import get

BUDGET = {"q8": 0.03, "q8_linear": 0.03, "q8_mantissa": 0.05, "q8_static_tree": 0.1, "q4": 0.3}


def reduce_all(xs, req, residuals=None, buffers=False):
    return run_ranks(len(xs), lambda t: np.array(engine.compressed_sum(
        t, req, xs[t.rank], None if residuals is None else residuals[t.rank])), buffers=buffers)


@pytest.mark.parametrize("n_ranks", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("schedule", ["two_phase", "allgather"])
@pytest.mark.parametrize("piece", [0, 2048])
def test_every_codebook_within_budget_and_identical(n_ranks, schedule, piece, rng):
    for name, budget in BUDGET.items():
        for n in (1, 9, 1023, 4099, 20_001):
            xs = [rng.standard_normal(n).astype(np.float32) for _ in range(n_ranks)]
            outs = reduce_all(xs, engine.Request(get(name), n, schedule, piece_elements=piece))
            exact = np.sum(xs, axis=0, dtype=np.float64)
            assert all(np.array_equal(outs[0], o) for o in outs[1:]), (name, n)
            assert np.abs(outs[0] - exact).mean() <= budget * np.abs(exact).mean() + 1e-7, (name, n)


def test_empty_tensor(rng):
    outs = reduce_all([np.zeros(0, np.float32)] * 3, engine.Request(get("q8"), 0))
    assert all(o.size == 0 for o in outs)


@pytest.mark.parametrize("schedule", ["two_phase", "allgather"])
def test_nan_and_inf_propagate(schedule, rng):
    n = 6000
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    xs[1][17] = np.nan
    xs[2][5000] = np.inf
    outs = reduce_all(xs, engine.Request(get("q8"), n, schedule))
    assert all(np.array_equal(outs[0], o, equal_nan=True) for o in outs)
    assert np.isnan(outs[0][17]) and not np.isfinite(outs[0][5000])
    assert np.isfinite(outs[0][1024:4000]).all()  # blocks holding neither stay finite


@pytest.mark.parametrize("name", ["twobit", "q4_threshold"])
def test_threshold_formats_converge_with_owned_residuals(name, rng):
    """Error feedback: the running sum of results tracks the running exact sum."""
    n, n_ranks = 5000, 3
    fmt = get(name).for_group("dense")
    scale = {"twobit": 0.2, "q4_threshold": 0.003}[name]  # below each format's top level
    grads = [(scale * rng.standard_normal(n)).astype(np.float32) for _ in range(n_ranks)]
    residuals = [ArrayResiduals() for _ in range(n_ranks)]
    got = np.zeros(n, np.float64)
    for _ in range(40):
        outs = reduce_all(grads, engine.Request(fmt, n, "two_phase", key="g"), residuals)
        assert all(np.array_equal(outs[0], o) for o in outs)
        got += outs[0]
    exact = 40 * np.sum(grads, axis=0, dtype=np.float64)
    assert np.abs(got - exact).mean() < 0.1 * np.abs(exact).mean()


def test_grouped_format_must_be_resolved():
    with pytest.raises(ValueError, match="layer group"):
        engine.Request(get("q4_threshold"), 10)


def test_a_rank_that_fails_does_not_hang_the_others():
    def fn(t):
        if t.rank == 1:
            raise KeyError("boom")
        return engine.compressed_sum(t, engine.Request(get("q8"), 100, "two_phase"),
                                     np.ones(100, np.float32))
    with pytest.raises(KeyError, match="boom"):
        run_ranks(3, fn)


def test_policy_decisions_and_bytes():
    s = Setting(get("q8"))
    assert not policy.decide(s, False, 10_000, 4).compress
    assert not policy.decide(s, True, None, 4).compress
    assert not policy.decide(s, True, 1000, 4).compress
    d = policy.decide(s, True, 1 << 20, 4)
    assert d.compress and d.bytes_compressed < d.bytes_uncompressed / 3.9
    assert d.bytes_compressed == engine.bytes_sent(policy.request(s, 1 << 20, "other"), 4)
    # one planner: backprop order, a large tensor alone, groups kept apart when asked
    shapes = [(3, 3, 8, 8), (100, 10), (10,), (5_000_000,)]
    assert policy.plan_buckets(shapes, 1 << 20) == [[3], [2, 1, 0]]
    assert policy.plan_buckets(shapes, 1 << 20, by_group=True) == [[3], [2], [1], [0]]
    small = [(10,), (5, 5), (6,)]
    assert policy.plan_buckets(small, 1 << 20) == [[2, 1, 0]]
    assert policy.plan_buckets(small, 1 << 20, by_group=True) == [[2, 0], [1]]
    # groups that alternate (a convolution, then its batch norm's vectors) fill a bucket each
    resnet_like = [(3, 3, 8, 8), (8,), (8,)] * 50 + [(512, 10), (10,)]
    plan = policy.plan_buckets(resnet_like, 1 << 20, by_group=True)
    assert [len(b) for b in plan] == [101, 1, 50]  # other (biases, norms), dense, conv
    assert sorted(i for b in plan for i in b) == list(range(len(resnet_like)))
    assert all(b == sorted(b, reverse=True) for b in plan)  # backprop order inside a bucket
    sized = policy.plan_buckets(resnet_like, 4 * 3 * 3 * 8 * 8 * 20, by_group=True)  # 20 conv weights a bucket
    assert [len(b) for b in sized if len(resnet_like[b[0]]) == 4] == [20, 20, 10]
