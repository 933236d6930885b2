"""The speedup model's arithmetic on hand-checked cases, and the CLI end to end (no Horovod)."""
import json
import math

import pytest

from horovod_q8.collective.plan import make_plan
from horovod_q8.formats import get
from horovod_q8.speedup import layers, model as M
from horovod_q8.speedup.model import allreduce_time
from horovod_q8.speedup.network import Cluster, Link, link


def test_ring_bytes_latency_and_fp16_codec():
    r = allreduce_time("fp32", 1000, 4, alpha=1e-3, bandwidth=1000.0)
    assert r["schedule"] == "ring"
    assert r["bytes_per_rank"] == 6000  # 2 * 3/4 * 4000
    assert r["wire"] == pytest.approx(6.0)
    assert r["latency"] == pytest.approx(6e-3)  # 2 (P-1) alpha
    assert r["total"] == pytest.approx(6.006)
    h = allreduce_time("fp16", 1000, 4, alpha=0.0, bandwidth=1000.0, encode_rate=1000, decode_rate=1000)
    assert h["bytes_per_rank"] == 3000 and h["codec"] == pytest.approx(2.0)  # cast there and back


def test_memory_term_of_mpis_ring():
    """fp32 ring: one copy of n plus (P-1)/P n adds; the q-formats' sum is in their codec."""
    r = allreduce_time("fp32", 1000, 4, alpha=0.0, bandwidth=1e12, reduce_rate=1000.0, copy_rate=2000.0)
    assert r["memory"] == pytest.approx(1000 / 2000 + 0.75 * 1000 / 1000)
    assert r["total"] == pytest.approx(r["wire"] + r["memory"])
    assert allreduce_time("fp32", 1000, 4, alpha=0.0, bandwidth=1e9)["memory"] == 0.0
    q8 = allreduce_time("q8", 4096, 4, alpha=0.0, bandwidth=1e9, reduce_rate=1.0, copy_rate=1.0)
    assert q8["memory"] == 0.0


def test_two_phase_bytes_and_codec_count():
    # q8, blocks of 1024: 4 chunks of 1024 elements, each 4 bytes of scale + 1024 codes.
    r = allreduce_time("q8", 4096, 4, alpha=0.5, bandwidth=1028.0, encode_rate=1024, decode_rate=1024)
    assert r["schedule"] == "two_phase"
    assert r["bytes_per_rank"] == 6 * 1028 == make_plan(get("q8"), 4096, 4, 0).bytes_sent()
    assert r["wire"] == pytest.approx(6.0)  # alltoall 3 chunks + allgather 3 chunks
    assert r["latency"] == pytest.approx(3.0)  # (P-1) + (P-1) messages
    # encode n + my chunk; decode P received chunks + the whole gathered tensor
    assert r["codec"] == pytest.approx((4096 + 1024) / 1024 + (4 * 1024 + 4096) / 1024)


def test_two_phase_uneven_matches_plan():
    for n, p in ((1001, 3), (25_600_000, 7), (5, 4)):
        r = allreduce_time("q4", n, p, alpha=0, bandwidth=1e9)
        assert r["bytes_per_rank"] == make_plan(get("q4"), n, p, 0).bytes_sent()


def test_allgather_bytes_and_codec_count():
    r = allreduce_time("q8", 4096, 2, alpha=1.0, bandwidth=4112.0, encode_rate=4096, decode_rate=4096)
    assert r["schedule"] == "allgather"
    assert r["bytes_per_rank"] == 4112  # 4 scales + 4096 codes, sent once
    assert r["wire"] == pytest.approx(1.0) and r["latency"] == pytest.approx(1.0)
    assert r["codec"] == pytest.approx(1 + 2)  # encode once, decode both copies
    forced = allreduce_time("q8", 4096, 4, alpha=0, bandwidth=4112.0, schedule="allgather")
    assert forced["bytes_per_rank"] == 3 * 4112


def test_alltoall_nic_share_with_gpus_per_node():
    # q4, 8 ranks, 4 per node, chunks of 1024 elements = 4 + 512 bytes each.
    fast = 1e15
    r = allreduce_time("q4", 8192, 8, alpha=0, bandwidth=1.0, gpus_per_node=4, intra_bandwidth=fast)
    whole = 8 * 516
    assert r["nic_bytes"] == 4 * 4 / 8 * whole + 7 * 516  # g (P-g)/P of it, then the allgather ring
    assert r["wire"] == pytest.approx(r["nic_bytes"], rel=1e-9)
    ring = allreduce_time("fp32", 8192, 8, alpha=0, bandwidth=1.0, gpus_per_node=4, intra_bandwidth=fast)
    assert ring["nic_bytes"] == 2 * 7 / 8 * 4 * 8192  # one ring edge per node crosses the NIC


def test_hierarchical_ring_nic_bytes():
    r = allreduce_time("fp32", 1000, 8, alpha=0, bandwidth=1.0, gpus_per_node=4, intra_bandwidth=1e15,
                       schedule="hierarchical")
    assert r["nic_bytes"] == 4000  # 2 (N-1)/N * S with N = 2 nodes
    assert r["wire"] == pytest.approx(4000, rel=1e-9)


def test_schedules_as_horovod_q8_runs_them():
    kw = dict(alpha=0, bandwidth=1e9)
    assert allreduce_time("none", 10, 3, **kw)["schedule"] == "ring"
    assert allreduce_time("q8", 10_000, 2, **kw)["schedule"] == "allgather"
    assert allreduce_time("twobit", 10_000, 3, **kw)["schedule"] == "two_phase"
    with pytest.raises(ValueError):
        allreduce_time("q8", 10, 4, schedule="ring", **kw)
    with pytest.raises(ValueError):
        allreduce_time("q8", 10, 6, gpus_per_node=4, **kw)
    assert allreduce_time("q8", 10, 1, **kw)["total"] == 0.0


def _setup(compute, bw, alpha=0.0, overlap=M.OVERLAP, **kw):
    lk = Link("x", bw, alpha)
    return M.Setup(Cluster(lk, lk, 1), compute, overlap=overlap, codec="none", **kw)


def test_overlap_rule_and_speedup_one_at_one_gpu():
    spec = layers.single(1_000_000)  # fp32 ring on 2 ranks: 4 MB over 8 MB/s = 0.5 s
    s = M.step("fp32", spec, 2, _setup(0.9, 8e6))
    assert s["comm"] == pytest.approx(0.5)
    assert s["exposed"] == pytest.approx(0.5 - 0.9 / 3)
    assert s["speedup"] == pytest.approx(2 * 0.9 / (0.9 + 0.2))
    hidden = M.step("fp32", spec, 2, _setup(3.0, 8e6))
    assert hidden["exposed"] == 0.0 and hidden["speedup"] == pytest.approx(2.0)
    for m in ("fp32", "fp16", "q8", "q4", "twobit"):
        assert M.step(m, spec, 1, _setup(0.1, 1.0))["speedup"] == 1.0


def test_fusion_sets_the_number_of_calls_and_latency():
    sizes = [4 * 2 ** 20] * 10  # ten 16 MB float32 gradients
    assert M.buckets(sizes, 4) == [16 * 2 ** 20, 16 * 2 ** 20, 8 * 2 ** 20]
    assert M.buckets(sizes, 2) == [32 * 2 ** 20, 8 * 2 ** 20]  # fp16 fills buffers twice as far
    assert M.buckets([100, 20 * 2 ** 20, 100], 4) == [100, 20 * 2 ** 20, 100]  # too big: alone
    spec = layers.ModelSpec("t", tuple(sizes), "test")
    s = M.comm_time("fp32", spec.sizes, 4, _setup(1.0, 1e12, alpha=1e-3))
    assert s["calls"] == 3 and s["latency"] == pytest.approx(3 * 2 * 3 * 1e-3)


def test_break_even_bisection():
    # 2 ranks, no latency, no overlap: fp32 ring moves 4n bytes, q8 allgather C bytes plus 3 s of
    # codec (encode n, decode 2n at n el/s). Equal at B = (4n - C) / 3.
    n = 1024 * 1000
    c = 1000 * (4 + 1024)
    spec = layers.single(n)
    lk = Link("x", 1.0, 0.0)
    setup = M.Setup(Cluster(lk, lk, 1), 1.0, overlap=0.0, codec="gpu", encode_rate=n, decode_rate=n)
    bw = M.break_even(spec, 2, "q8", "fp32", setup, lo=1e4, hi=1e9, rel=0.0)
    assert bw == pytest.approx((4 * n - c) / 3, rel=1e-6)
    free = M.Setup(setup.cluster, 1.0, overlap=0.0, codec="none")
    assert math.isinf(M.break_even(spec, 2, "q8", "fp32", free, lo=1e4, hi=1e9))


def test_models_and_links():
    assert layers.alexnet().params == 61_100_840
    assert link("25gbe").bandwidth == 25e9 / 8 and link("10gbit").bandwidth == 1.25e9
    assert link("nvlink").name == "nvlink-v100"
    with pytest.raises(ValueError):
        link("carrier-pigeon")


def test_layer_files(tmp_path):
    j = tmp_path / "m.json"
    j.write_text(json.dumps({"conv": 10, "fc": 20}))
    assert layers.load(str(j)).sizes == (10, 20)
    c = tmp_path / "m.csv"
    c.write_text("name,params\nconv,10\nfc,20\n")
    assert layers.load(str(c)).sizes == (10, 20)


def test_cli_smoke(tmp_path, capsys):
    from horovod_q8.cli import main
    png, js = tmp_path / "speedup.png", tmp_path / "rows.json"
    main(["speedup", "--model", "alexnet", "--compute-time", "0.19", "--batch", "128",
          "--network", "10gbe", "--gpus", "1,2,4,8", "--add-gpus", "6", "--plot", str(png),
          "--json", str(js)])
    out = capsys.readouterr().out
    assert png.stat().st_size > 1000
    assert "break-even at 8 GPUs, q8 vs fp32" in out and "| 6 |" in out
    rows = json.loads(js.read_text())["rows"]
    assert {r["method"] for r in rows} == {"fp32", "fp16", "q8", "q4", "twobit"}
    assert all(r["speedup"] == 1.0 for r in rows if r["gpus"] == 1)


def test_pipelined_total_is_a_two_stage_pipeline():
    from horovod_q8.speedup.model import pipelined_total
    whole = dict(total=1.0, wire=0.5, latency=0.01, codec=0.4, memory=0.02)
    n = 10_000_000
    # 4 pieces, wire-bound: wire plus 4 pieces' latency, then a quarter of the codec
    assert pipelined_total(whole, n, 2_500_000) == pytest.approx(0.54 + 0.4 / 4 + 0.02)
    # codec-bound
    assert pipelined_total(dict(whole, codec=0.9), n, 2_500_000) == pytest.approx(0.9 + 0.54 / 4 + 0.02)
    # one piece (piece 0 or >= n): no overlap at all
    for piece in (0, n, 2 * n):
        assert pipelined_total(whole, n, piece) == pytest.approx(0.51 + 0.4 + 0.02)


def test_a_slower_alltoall_stretches_only_the_two_phase_first_step():
    from horovod_q8.speedup.model import allreduce_time
    n, p, bw = 8_000_000, 4, 1e8
    base = allreduce_time("q8", n, p, alpha=0.0, bandwidth=bw)
    slow = allreduce_time("q8", n, p, alpha=0.0, bandwidth=bw, alltoall_bandwidth=bw / 2)
    splits = make_plan(get("q8"), n, p, 0).send_splits
    # the alltoall sends the P-1 other chunks (whole blocks: the last one shorter): twice as long;
    # the allgather is unchanged
    assert slow["wire"] - base["wire"] == pytest.approx((sum(splits) - splits[0]) / bw, rel=1e-6)
    fp32 = allreduce_time("none", n, p, alpha=0.0, bandwidth=bw, alltoall_bandwidth=bw / 2)
    assert fp32["wire"] == allreduce_time("none", n, p, alpha=0.0, bandwidth=bw)["wire"]
