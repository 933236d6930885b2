"""`bench.common.rounds`: every compression timed once per round, in an order shuffled each
round, ratios taken within a round; and `bench allreduce` (breakdown, sizes) printing them at
-np 2."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from horovod_q8.bench.common import markdown, ratio_range, readback, round_order, round_ratios, rounds


def test_a_ratio_range_is_rounded_as_the_median_beside_it():
    """A round's lowest ratio equal to the median prints as the same number in both cells."""
    lo = 0.6468
    median_cell = markdown(["r"], [[lo]]).splitlines()[-1].strip("| ")
    assert median_cell == "0.647" and ratio_range(lo, 0.7) == "0.647-0.7"
    assert ratio_range(1.8467, 2.6705) == "1.85-2.67"


def test_every_fn_once_per_round_after_a_warm_up_in_a_shuffled_order():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    times = rounds(fns, 4)
    assert calls[:3] == list("abc")  # the warm-ups
    assert calls[3:] == [name for r in range(4) for name in round_order("abc", r)]
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}
    assert all(t >= 0 for v in times.values() for t in v)


def test_every_name_runs_after_every_other_and_in_every_place():
    """A fixed rotation keeps one predecessor for good; a shuffle per round (the same on every
    rank) gives each name every predecessor and every place within bench auto's 41 rounds."""
    names = ["none", "fp16", "q8", "q4", "auto"]
    orders = [round_order(names, r) for r in range(41)]
    assert orders == [round_order(list(names), r) for r in range(41)]  # deterministic: every rank alike
    assert all(sorted(o) == sorted(names) for o in orders)
    before = {n: {o[o.index(n) - 1] for o in orders if o.index(n) > 0} for n in names}
    assert all(before[n] == set(names) - {n} for n in names), before
    assert all({o.index(n) for o in orders} == set(range(5)) for n in names)


def test_ratios_are_taken_within_a_round():
    # the base slows down in round 2 with everyone else: the ratio does not move
    times = {"fp16": [1.0, 2.0, 1.0], "q8": [0.5, 1.0, 0.25]}
    r = round_ratios(times, "fp16")
    assert r["fp16"] == (1.0, 1.0, 1.0)
    assert r["q8"] == (2.0, 2.0, 4.0)
    assert round_ratios(times, "none") == {}


def test_readback_reads_one_element_or_every_result():
    tf = pytest.importorskip("tensorflow")
    a, b = tf.reshape(tf.range(6.0), (2, 3)), tf.constant([7.0, 8.0])
    assert readback(a).tolist() == [0.0]
    assert readback([a, b]).tolist() == [7.0]  # the last tensor: the op has finished
    full = readback([a, b], "all")
    assert [x.tolist() for x in full] == [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [7.0, 8.0]]


@pytest.mark.parallel
def test_bench_allreduce_prints_round_ratios_at_two_ranks():
    pytest.importorskip("horovod.tensorflow")
    from test_parallel import horovodrun  # tests/ is on sys.path under pytest

    cli = str(Path(sys.executable).parent / "horovod-q8")
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", cli, "bench", "allreduce",
           "--breakdown", "--breakdown-elements", "20000", "--sizes-mb", "0.05",
           "--compressions", "none,fp16,q8", "--pipeline-elements", "0,8192", "--repeats", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert out.count("read-back of one element") == 2  # both tables say how each op was waited for
    rows = {}
    for line in out.splitlines():
        m = re.search(r"\| (none|fp16|q8|q8/p8192) \|(.*)\|$", line)
        if m:
            rows.setdefault(m.group(1), []).append([c.strip() for c in m.group(2).split("|")])
    assert set(rows) == {"none", "fp16", "q8", "q8/p8192"}, out[-4000:]
    assert all(len(v) == 2 for v in rows.values())  # the breakdown's table and the size's
    breakdown_fp16, sizes_fp16 = rows["fp16"]
    assert breakdown_fp16[-3:] == ["1", "1", "1"] and sizes_fp16[-1] == "1-1"
    for label in ("none", "q8", "q8/p8192"):
        breakdown, sizes = rows[label]
        low, mid, high = float(breakdown[-2]), float(breakdown[-3]), float(breakdown[-1])
        assert 0 < low <= mid <= high
        lo, hi = (float(v) for v in sizes[-1].split("-"))
        assert 0 < lo <= float(sizes[-2]) <= hi
