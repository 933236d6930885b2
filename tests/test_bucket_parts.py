"""A bucket's members encoded in place (`collective.bucket_parts`): the bytes, residuals and sums
of encoding their padded concatenation, for every format kind and at the edges."""
from __future__ import annotations

import numpy as np
import pytest

from horovod_q8.collective import bucket_parts, engine
from horovod_q8.collective import plan as P
from horovod_q8.collective.bucket_parts import Parts, layout, unit
from horovod_q8.collective.threads import run_ranks
from horovod_q8.formats import get

FORMATS = [get("q8"), get("q8_linear"), get("q8_static_tree"), get("q4"), get("twobit"),
           get("q4_threshold").for_group("dense"), get("q8", block_size=1000), get("q4", block_size=40),
           get("q8", block_size=0), get("q8", rounding="stochastic")]
SIZES = [[], [0], [1], [7, 0, 1], [3000], [1023, 1, 1024, 5000, 17], [100] * 40, [70000, 3, 90001, 2048],
         [300000, 5, 262144, 1]]


def members(rng, sizes, special: bool = False):
    xs = [(rng.standard_normal(s) * rng.choice([1e-3, 1.0, 50.0])).astype(np.float32) for s in sizes]
    big = [k for k, s in enumerate(sizes) if s > 2]
    if special and big:  # NaN, +Inf, -Inf and zeros in the members
        for k, v in zip(big * 3, (np.nan, np.inf, -np.inf)):
            xs[k][rng.integers(xs[k].size)] = v
        xs[big[-1]][: xs[big[-1]].size // 2] = 0
    return xs


def bucket(xs, fmt):
    """(Parts as the fused path builds them: big members alone, small ones packed; the padded flat)."""
    parts = bucket_parts.in_slots(xs, fmt, np.concatenate)
    flat = np.zeros(parts.size, np.float32)
    for a, start in zip(parts.arrays, parts.starts):
        flat[start: start + a.size] = a
    return parts, flat


def test_layout_pads_below_a_unit_and_keeps_order():
    fmt = get("q8")
    u = unit(fmt)
    sizes = [5000, 3, 1024, 0, 700, 2049]
    alone, packed, slots = layout(sizes, fmt)
    assert alone == [0, 2, 5] and packed == [1, 4]
    assert all(s % u == 0 for s in slots) and u % 16 == 0
    assert all(0 <= s - sizes[k] < u for s, k in zip(slots, alone))
    assert slots[-1] == u  # 703 packed elements in one unit
    assert layout([], fmt) == ([], [], [])


@pytest.mark.parametrize("name", ["q8", "q4", "twobit"])
def test_member_starts_find_every_member_in_the_padded_concatenation(name, rng):
    fmt = get(name)
    for sizes in SIZES:
        xs = members(rng, sizes)
        _, flat = bucket(xs, fmt)
        for x, start in zip(xs, bucket_parts.member_starts(sizes, fmt)):
            np.testing.assert_array_equal(flat[start: start + x.size], x)


def test_slots_must_hold_their_members():
    with pytest.raises(ValueError, match="slots"):
        Parts([np.zeros(10, np.float32)], [8])


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f"{f.name}-b{f.block_size}-{f.rounding}")
@pytest.mark.parametrize("fb", [False, True], ids=["plain", "error_feedback"])
def test_encode_whole_same_bytes_and_residual(fmt, fb, rng):
    for sizes in SIZES:
        for special in (False, True):
            parts, flat = bucket(members(rng, sizes, special), fmt)
            n = flat.size
            plan = P.make_plan(fmt, n, 1, 0, "allgather")
            keeps = fb or fmt.uses_residual
            r0 = (rng.standard_normal(n) * 0.01).astype(np.float32) if keeps else None
            r_flat = None if r0 is None else r0.copy()
            r_parts = None if r0 is None else r0.copy()
            want = P.encode_whole(plan, flat, r_flat, 11, fb)
            out = np.full(fmt.nbytes(n), 0xAB, np.uint8)  # a reused buffer's stale bytes
            got = P.encode_whole(plan, parts, r_parts, 11, fb, out=out)
            np.testing.assert_array_equal(got, want, err_msg=f"{sizes} special={special}")
            if keeps:
                np.testing.assert_array_equal(r_parts, r_flat)


@pytest.mark.parametrize("name", ["q8", "q4", "twobit", "q4_threshold"])
def test_the_product_formats_encode_in_place(name):
    """No silent fallback to assembling the bucket: whole, and at every two-phase chunk."""
    fmt = get(name).for_group("dense") if name == "q4_threshold" else get(name)
    parts = Parts([np.zeros(5000, np.float32), np.zeros(3000, np.float32)], layout([5000, 3000], fmt)[2])
    for size in (1, 2, 3, 8):
        plan = P.make_plan(fmt, parts.size, size, 0, "two_phase")
        assert all(bucket_parts.in_place(parts, fmt, False, plan.bounds(r)[0]) for r in range(size))


@pytest.mark.parametrize("n_ranks", [2, 3, 5])
@pytest.mark.parametrize("schedule", ["two_phase", "allgather"])
@pytest.mark.parametrize("name", ["q8", "q4", "twobit"])
def test_engine_sum_of_parts_is_the_sum_of_the_padded_concatenation(name, schedule, n_ranks, rng):
    fmt = get(name)
    sizes = [1023, 1, 0, 4096, 2500, 9, 20000]
    buckets = [bucket(members(rng, sizes, special=(r == 1)), fmt) for r in range(n_ranks)]
    n = buckets[0][1].size
    req = engine.Request(fmt, n, schedule)
    flat = run_ranks(n_ranks, lambda t: engine.compressed_sum(t, req, buckets[t.rank][1]))
    parts = run_ranks(n_ranks, lambda t: engine.compressed_sum(t, req, buckets[t.rank][0]))
    for a, b in zip(flat, parts):
        np.testing.assert_array_equal(a, b)
    assert all(np.array_equal(parts[0], p, equal_nan=True) for p in parts[1:])


def test_pieces_need_one_flat_tensor():
    req = engine.Request(get("q8"), 5000, piece_elements=2048)
    with pytest.raises(ValueError, match="one piece"):
        run_ranks(2, lambda t: engine.compressed_sum(t, req, Parts([np.zeros(2500, np.float32)] * 2)))


@pytest.mark.parametrize("sizes,pieces", [([524_289, 520_287, 3000], None), ([1000, 2000], 1), ([5000] * 300, None),
                                          ([1 << 20], 1)])
def test_slotted_request_decides_pieces_on_the_padded_size(sizes, pieces):
    """A bucket read in place goes as one piece of its padded slots; where that padded size
    makes two pieces (the unpadded one a single piece: 1,047,576 elements, padded 1,049,600 at
    pipeline_elements 2**20) the bucket goes concatenated, in pieces, instead."""
    req = engine.Request(get("q8"), sum(sizes), "auto", False, 1 << 20, "k")
    slotted = bucket_parts.slotted_request(req, sizes)
    if pieces is None:
        assert slotted is None and len(engine.Request(get("q8"), sum(layout(sizes, get("q8"))[2]), "auto", False,
                                                      1 << 20, "k").piece_sizes()) > 1
    else:
        assert slotted is not None and slotted.n == sum(layout(sizes, get("q8"))[2])
        assert len(slotted.piece_sizes()) == pieces
