"""The compressed allreduce's arithmetic without a framework: the engine on N thread ranks
(`collective.threads`), collectives the byte moves they perform."""
from __future__ import annotations

import numpy as np
import pytest

from horovod_q8.collective import engine
from horovod_q8.collective import plan as P
from horovod_q8.collective.threads import run_ranks
from horovod_q8.formats import get


def run_allreduce(xs, fmt, schedule, residuals=None):
    """Every rank's result of the compressed sum of xs[r] over r (the engine on thread ranks)."""
    n_ranks, n = len(xs), xs[0].size
    req = engine.Request(fmt, n, schedule)
    outs = run_ranks(n_ranks, lambda t: engine.compressed_sum(t, req, xs[t.rank]))
    return outs, [P.make_plan(fmt, n, n_ranks, r, schedule) for r in range(n_ranks)]


@pytest.mark.parametrize("schedule", ["two_phase", "allgather"])
@pytest.mark.parametrize("n_ranks", [1, 2, 3, 5])
@pytest.mark.parametrize("name,budget", [("q8", 0.03), ("q8_linear", 0.03), ("q4", 0.3)])
def test_sum_within_budget_and_identical(name, budget, n_ranks, schedule, rng):
    fmt = get(name)
    for n in (1, 7, 1000, 4099, 30001):
        xs = [rng.standard_normal(n).astype(np.float32) for _ in range(n_ranks)]
        outs, _ = run_allreduce(xs, fmt, schedule)
        exact = np.sum(xs, axis=0, dtype=np.float64)
        assert all(np.array_equal(outs[0], o) for o in outs[1:])
        assert np.abs(outs[0] - exact).mean() <= budget * np.abs(exact).mean() + 1e-7


@pytest.mark.parametrize("n_ranks", [2, 3, 4, 8])
def test_bytes_on_the_wire(n_ranks):
    n = 1 << 20
    for name, bits in (("q8", 8), ("q4", 4), ("twobit", 2)):
        fmt = get(name)
        two = P.make_plan(fmt, n, n_ranks, 0, "two_phase")
        ring = 2 * (n_ranks - 1) / n_ranks * n * bits / 8
        assert ring <= two.bytes_sent() <= ring * 1.01  # + the scales
        ag = P.make_plan(fmt, n, n_ranks, 0, "allgather")
        assert (n_ranks - 1) * n * bits / 8 <= ag.bytes_sent() <= (n_ranks - 1) * n * bits / 8 * 1.01


def test_auto_schedule():
    assert P.choose_schedule("auto", 2) == P.ALLGATHER
    assert P.choose_schedule("auto", 3) == P.TWO_PHASE
    with pytest.raises(ValueError, match="schedule"):
        P.choose_schedule("ring", 4)


def test_chunks_cover_the_tensor_once():
    for n in (0, 1, 9, 1000, 1001):
        for size in (1, 2, 3, 7):
            p = P.make_plan(get("q4"), n, size, 0)
            covered = [i for r in range(size) for i in range(*p.bounds(r))]
            assert covered == list(range(n))
            assert all(p.bounds(r)[0] % P.ALIGN == 0 for r in range(size) if p.chunk_len(r))


def test_nan_in_one_rank_reaches_every_rank(rng):
    xs = [rng.standard_normal(5000).astype(np.float32) for _ in range(3)]
    xs[1][17] = np.nan
    outs, _ = run_allreduce(xs, get("q8"), "two_phase")
    for o in outs:
        assert np.isnan(o[17]) and np.isfinite(o[3000:]).all()


def test_codebook_error_feedback_carries_what_was_dropped(rng):
    """With error feedback, sent + new residual == x + old residual, step after step."""
    fmt = get("q4")
    plan = P.make_plan(fmt, 5000, 1, 0, "allgather")
    residual = np.zeros(5000, np.float32)
    sent_total = np.zeros(5000, np.float64)
    x_total = np.zeros(5000, np.float64)
    for step in range(20):
        x = rng.standard_normal(5000).astype(np.float32)
        before = residual.copy()
        sent = P.sum_gathered(plan, P.encode_whole(plan, x, residual, step, error_feedback=True))
        np.testing.assert_allclose(sent + residual, x + before, rtol=1e-5, atol=1e-5)
        sent_total += sent
        x_total += x
    # the running total is off by one residual only, not by 20 steps of rounding
    assert np.abs(sent_total - x_total).max() <= np.abs(residual).max() + 1e-4


@pytest.mark.parametrize("name", ["q8", "q4_threshold"])
def test_reused_buffers_give_the_same_bits(name, rng):
    """Persistent buffers holding another call's bytes change nothing."""
    n_ranks, n = 3, 5003
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(n_ranks)]
    other = [np.full(n, 1e6, np.float32) for _ in range(n_ranks)]
    fmt = get(name).for_group("dense")
    fresh, _ = run_allreduce(xs, fmt, "two_phase")
    req = engine.Request(fmt, n, "two_phase")

    def twice(t):
        engine.compressed_sum(t, req, other[t.rank])
        first_out = t.buffer(f"{req.key}.out", n, np.float32)
        total = engine.compressed_sum(t, req, xs[t.rank])
        assert total is first_out  # decoded in place into the reused buffer
        return total.copy()

    for got in run_ranks(n_ranks, twice, buffers=True):
        np.testing.assert_array_equal(got, fresh[0])
