"""The emulated-cluster comparison: predictions come from the report's own link and codec numbers."""
from __future__ import annotations

import json

import pytest

from horovod_q8 import codec
from horovod_q8.speedup import emulated


def report(ranks: int, n: int = 1_000_000) -> dict:
    inf = float("inf")
    methods = {
        "none": dict(total=1.0, p2p=0.5, encode_rate=inf, decode_rate=inf),
        "q8": dict(total=1.0, p2p=0.5, encode_rate=1e8, decode_rate=2e8),
    }
    link = dict(alpha_s=1e-4, bandwidth_Bps=1e8, ring_bandwidth_Bps=5e7)
    return dict(ranks=ranks, elements=n, link=link, methods=methods)


def test_fp32_ring_uses_the_loaded_link_bandwidth():
    rows = {r["method"]: r for r in emulated.compare(report(4))}
    n = 1_000_000
    assert rows["none"]["predicted"] == pytest.approx(2 * 3 * 1e-4 + 2 * 3 / 4 * 4 * n / 5e7)
    # p2p: one message at the ping-pong bandwidth
    assert rows["none"]["p2p_predicted"] == pytest.approx(1e-4 + 4 * n / 1e8)


def test_q8_two_ranks_is_an_allgather_with_codec_time():
    n = 1_000_000
    rows = {r["method"]: r for r in emulated.compare(report(2, n))}
    nbytes = codec.nbytes("q8", (n,))
    # encode once, decode both copies; one whole tensor per edge
    assert rows["q8"]["codec"] == pytest.approx(n / 1e8 + 2 * n / 2e8)
    assert rows["q8"]["predicted"] == pytest.approx(1e-4 + nbytes / 5e7 + n / 1e8 + 2 * n / 2e8)
    assert rows["q8"]["p2p_predicted"] == pytest.approx(1e-4 + nbytes / 1e8 + n / 1e8 + n / 2e8)


def test_table_names_each_run(tmp_path):
    path = tmp_path / "transfer_4x1gbit.json"
    path.write_text(json.dumps(report(4)))
    text = emulated.table([str(path)])
    assert "transfer_4x1gbit: 4 hosts" in text and "| q8 |" in text


def test_mpi4py_ring_is_predicted_as_the_same_ring():
    r = report(4)
    r["methods"]["none_ring"] = dict(r["methods"]["none"])
    rows = {row["method"]: row for row in emulated.compare(r)}
    n = 1_000_000
    assert rows["none_ring"]["predicted"] == rows["none"]["predicted"]
    assert rows["none_ring"]["p2p_predicted"] == pytest.approx(1e-4 + 4 * n / 1e8)
