"""The model against the emulated cluster: predict each `bench transfer` allreduce and p2p
transfer from that run's independent measurements only (ping-pong latency, the bandwidth of
links loaded both ways, codec, copy and add rates timed on their own, with every rank at once
for the allreduce and with one rank for the p2p transfer), then put prediction and measurement side by side.

    python -m horovod_q8.speedup.emulated docs/runs/cluster/2026-11-30-66d42d6/transfer_*.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import List, Sequence

from horovod_q8 import codec
from horovod_q8.bench.common import markdown
from horovod_q8.bench.pipelined import whole_method
from horovod_q8.speedup.model import allreduce_time, pipelined_total

TOLERANCE = 0.15


MPI_RING = {"none_ring": "none"}  # bench names the model does not know: the same algorithm


def _bytes_p2p(method: str, n: int) -> int:
    method = whole_method(method)
    return {"none": 4 * n, "none_ring": 4 * n, "fp16": 2 * n}.get(method) or codec.nbytes(method, (n,))


def link_bandwidth(link: dict) -> float:
    """Bytes/s per link for the collectives: both directions loaded, when the run measured it."""
    return link.get("ring_bandwidth_Bps", link["bandwidth_Bps"])


def compare(report: dict) -> List[dict]:
    """One row per method: measured and predicted allreduce and p2p seconds."""
    link, n, ranks = report["link"], report["elements"], report["ranks"]
    alpha = link["alpha_s"]
    bw = link_bandwidth(link)
    rows = []
    for method, m in report["methods"].items():
        rates = {k: m[k] for k in ("encode_rate", "decode_rate", "reduce_rate", "copy_rate") if k in m}
        base = whole_method(method)
        pred = allreduce_time(MPI_RING.get(base, base), n, ranks, alpha=alpha, bandwidth=bw,
                              alltoall_bandwidth=link.get("alltoall_bandwidth_Bps"), **rates)
        if base != method:
            pred = dict(pred, total=pipelined_total(pred, n, report["pipeline_elements"]))
        # p2p: one rank encodes, one decodes, the others wait: the rates of a lone rank
        enc, dec = m.get("encode_rate_alone", m["encode_rate"]), m.get("decode_rate_alone", m["decode_rate"])
        p2p = (alpha + _bytes_p2p(method, n) / link["bandwidth_Bps"]
               + (0.0 if method in MPI_RING or method == "none" else n / enc + n / dec))
        rounds = m.get("total_by_round", [m["total"]])
        rows.append(dict(method=method, ranks=ranks, measured=m["total"], predicted=pred["total"],
                         spread=(min(rounds), max(rounds)),
                         wire=pred["wire"] + pred["latency"], codec=pred["codec"], memory=pred["memory"],
                         p2p_measured=m.get("p2p", 0.0), p2p_predicted=p2p))
    return rows


def table(paths: Sequence[str]) -> str:
    out = []
    hits = {"allreduce": [0, 0], "p2p": [0, 0]}
    for path in paths:
        report = json.loads(Path(path).read_text())
        rows = compare(report)
        gbit = link_bandwidth(report["link"]) * 8 / 1e9
        out.append(f"### {Path(path).stem}: {report['ranks']} hosts, {report['elements']} elements, "
                   f"links {gbit:.2f} Gbit/s, alpha {report['link']['alpha_s'] * 1e6:.0f} us, "
                   f"medians of {report.get('rounds', 1)} round(s)\n")
        body = []
        for r in rows:
            err = r["predicted"] / r["measured"] - 1
            perr = r["p2p_predicted"] / r["p2p_measured"] - 1 if r["p2p_measured"] else 0.0
            for key, e in (("allreduce", err), ("p2p", perr)):
                hits[key][0] += abs(e) <= TOLERANCE
                hits[key][1] += 1
            lo, hi = r["spread"]
            body.append([r["method"], r["measured"] * 1e3, f"{lo * 1e3:.0f}-{hi * 1e3:.0f}",
                         r["predicted"] * 1e3, f"{err:+.0%}",
                         "yes" if abs(err) <= TOLERANCE else "no", r["wire"] * 1e3, r["codec"] * 1e3,
                         r["memory"] * 1e3,
                         r["p2p_measured"] * 1e3, r["p2p_predicted"] * 1e3, f"{perr:+.0%}"])
        out.append(markdown(["method", "allreduce measured ms", "rounds min-max", "predicted ms", "error",
                             f"within {TOLERANCE:.0%}", "pred. wire ms", "pred. codec ms", "pred. memory ms",
                             "p2p measured ms", "p2p predicted ms", "p2p error"], body))
    out.append(", ".join(f"{k}: {h} of {n} within {TOLERANCE:.0%}" for k, (h, n) in hits.items()))
    return "\n\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m horovod_q8.speedup.emulated", description=__doc__)
    p.add_argument("reports", nargs="+", help="JSON files written by `horovod-q8 bench transfer --json`")
    print(table(p.parse_args(argv).reports))


if __name__ == "__main__":
    main()
