"""The alpha-beta cost of one allreduce of n float32 values, per schedule: the speedup model's
core (`speedup/model.py` builds steps and speedups on it) and what `Auto` predicts with.

Costs per allreduce of n elements on P ranks, g per node (N = P/g nodes), S = wire bytes:
- ring (Horovod/NCCL for fp32, fp16): 2(P-1) alpha + 2(P-1)/P S / bw; on a flat ring only one
  ring edge per node crosses the NIC, so the slowest of NIC and intra link sets the pace.
- two-phase (horovod_q8, P > 2): alltoall then ring allgather of the compressed chunks. The
  alltoall puts g(P-g)/P of the compressed bytes on each node's NIC, the allgather (P-1)/P.
- allgather (horovod_q8, P <= 2): (P-1) whole compressed tensors per edge.
- hierarchical: reduce-scatter inside the node, the above among the N nodes on 1/g of the
  data (g flows share the NIC), allgather inside the node. For fp32/fp16 that is Horovod's
  HOROVOD_HIERARCHICAL_ALLREDUCE; for the q-formats it is a schedule horovod_q8 does not have.
Codec time (serial with the wire, as in plan.py) counts the elements encoded, decoded and summed
(every part's elements of the ranks' sum, at its own rate where one was measured).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

from horovod_q8.collective import plan as P
from horovod_q8.formats import COMPRESSION_NAMES, get

GBIT = 1e9 / 8  # bytes/s in one Gbit/s


@dataclass(frozen=True)
class Link:
    """One full-duplex link: `bandwidth` bytes/s in each direction, `alpha` seconds per message."""

    name: str
    bandwidth: float
    alpha: float

    def __post_init__(self) -> None:
        if self.bandwidth <= 0 or self.alpha < 0:
            raise ValueError(f"{self.name}: bandwidth must be > 0 and alpha >= 0")

    @property
    def gbit(self) -> float:
        return self.bandwidth / GBIT


RING, HIERARCHICAL = "ring", "hierarchical"
TWO_PHASE, ALLGATHER = P.TWO_PHASE, P.ALLGATHER
SCHEDULES = ("auto", RING, TWO_PHASE, ALLGATHER, HIERARCHICAL)
UNCOMPRESSED = {"none": 4, "fp16": 2}  # bytes per element of Horovod's own methods


def canonical(method: str) -> str:
    """"fp32" is Horovod's "none"; anything else must be a --compression name."""
    m = "none" if method == "fp32" else method
    if m not in COMPRESSION_NAMES:
        raise ValueError(f"unknown method {method!r}; choose from fp32, {', '.join(COMPRESSION_NAMES)}")
    return m


def label(method: str) -> str:
    return "fp32" if method in ("none", "fp32") else method


def resolve_schedule(method: str, schedule: str, ranks: int) -> str:
    """What runs: "auto" is Horovod's ring for none/fp16 and plan.choose_schedule for ours."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if canonical(method) in UNCOMPRESSED:
        if schedule in ("auto", RING, HIERARCHICAL):
            return RING if schedule == "auto" else schedule
        raise ValueError(f"{label(method)} is reduced by Horovod's allreduce: ring or hierarchical")
    if schedule == RING:
        raise ValueError(f"{method}: quantized codes cannot be summed on a ring (docs/design.md)")
    return schedule if schedule == HIERARCHICAL else P.choose_schedule(schedule, ranks)


def _div(x: float, rate: float) -> float:
    return 0.0 if x == 0 or math.isinf(rate) else x / rate


@dataclass(frozen=True)
class _Topo:
    ranks: int
    g: int
    nodes: int
    inter: Link
    intra: Link
    alltoall_efficiency: float = 1.0  # share of the link rate an all-to-all reaches

    @property
    def edge(self) -> tuple:
        """(bandwidth, alpha) of the slowest hop of a ring over all ranks."""
        if self.nodes == 1:
            return self.intra.bandwidth, self.intra.alpha
        if self.g == 1:
            return self.inter.bandwidth, self.inter.alpha
        return (min(self.inter.bandwidth, self.intra.bandwidth), max(self.inter.alpha, self.intra.alpha))


def _topo(ranks: int, gpus_per_node: int, inter: Link, intra: Link) -> _Topo:
    g = max(1, min(gpus_per_node, ranks))
    if ranks % g:
        raise ValueError(f"{ranks} ranks do not fill nodes of {gpus_per_node} GPUs")
    return _Topo(ranks, g, ranks // g, inter, intra)


def _ring(n: int, bpe: int, t: _Topo) -> dict:
    s, p = n * bpe, t.ranks
    bw, a = t.edge
    per_edge = 2 * (p - 1) / p * s
    return dict(wire=per_edge / bw, latency=2 * (p - 1) * a, enc=n if bpe == 2 else 0,
                dec=n if bpe == 2 else 0, red=(p - 1) / p * n, copy=n, bytes_per_rank=round(per_edge),
                nic_bytes=round(per_edge) if t.nodes > 1 else 0)


def _hier_ring(n: int, bpe: int, t: _Topo) -> dict:
    if t.nodes == 1 or t.g == 1:
        return _ring(n, bpe, t)
    s, g, nn = n * bpe, t.g, t.nodes
    local = 2 * (g - 1) / g * s  # reduce-scatter + allgather inside the node
    nic = 2 * (nn - 1) / nn * s  # g shards of s/g, each ring-allreduced over N nodes
    return dict(wire=local / t.intra.bandwidth + nic / t.inter.bandwidth,
                latency=2 * (g - 1) * t.intra.alpha + 2 * (nn - 1) * t.inter.alpha,
                enc=n if bpe == 2 else 0, dec=n if bpe == 2 else 0,
                red=(g - 1) / g * n + (nn - 1) / nn * n / g, copy=n,
                bytes_per_rank=round(local + nic / g), nic_bytes=round(nic))


@lru_cache(maxsize=4096)
def _chunks(fmt, n: int, ranks: int) -> tuple:
    """(bytes of every rank's chunk, rank 0's chunk length, rank 0's plan.bytes_sent())."""
    plan = P.make_plan(fmt, n, ranks, 0, TWO_PHASE)
    return tuple(plan.send_splits), plan.chunk_len(0), plan.bytes_sent()


def _two_phase(fmt, n: int, t: _Topo) -> dict:
    cb, mine, sent = _chunks(fmt, n, t.ranks)
    g, p = t.g, t.ranks
    nic_a2a = g * sum(cb[g:])  # every rank of node 0 sends every off-node rank its chunk
    local_a2a = sum(cb[1:g])
    gathered = sum(cb) - cb[0]  # a ring allgather moves P-1 chunks over every edge
    bw, a = t.edge
    a2a = max(nic_a2a / t.inter.bandwidth if t.nodes > 1 else 0.0,
              local_a2a / t.intra.bandwidth) / t.alltoall_efficiency
    return dict(wire=a2a + gathered / bw, latency=2 * (p - 1) * a, enc=n + mine, sum=p * mine, dec=n,
                bytes_per_rank=sent, nic_bytes=(nic_a2a + gathered) if t.nodes > 1 else 0)


def _allgather(fmt, n: int, t: _Topo) -> dict:
    plan = P.make_plan(fmt, n, t.ranks, 0, ALLGATHER)
    bw, a = t.edge
    per_edge = (t.ranks - 1) * fmt.nbytes(n)
    return dict(wire=per_edge / bw, latency=(t.ranks - 1) * a, enc=n, sum=t.ranks * n, dec=0,
                bytes_per_rank=plan.bytes_sent(), nic_bytes=per_edge if t.nodes > 1 else 0)


def _hier_two_phase(fmt, n: int, t: _Topo) -> dict:
    if t.nodes == 1 or t.g == 1:
        return _two_phase(fmt, n, t)
    g, nn = t.g, t.nodes
    shard = -(-n // g)
    cb, mine, _ = _chunks(fmt, shard, nn)
    c = g * sum(cb)  # compressed bytes of the whole tensor
    rs = (g - 1) / g * 4 * n  # float32 reduce-scatter inside the node
    nic = 2 * (nn - 1) / nn * c
    ag_local = (g - 1) / g * c
    return dict(wire=(rs + ag_local) / t.intra.bandwidth + nic / t.inter.bandwidth,
                latency=2 * (g - 1) * t.intra.alpha + 2 * (nn - 1) * t.inter.alpha,
                enc=shard + mine, sum=nn * mine, dec=n,
                bytes_per_rank=round(rs + nic / g + ag_local), nic_bytes=round(nic))


def allreduce_time(method: str, elements: int, ranks: int, *, alpha: float, bandwidth: float,
                   encode_rate: float = math.inf, decode_rate: float = math.inf,
                   reduce_rate: float = math.inf, copy_rate: float = math.inf, sum_rate: Optional[float] = None,
                   schedule: str = "auto", gpus_per_node: int = 1,
                   intra_bandwidth: Optional[float] = None, intra_alpha: Optional[float] = None,
                   alltoall_bandwidth: Optional[float] = None) -> dict:
    """Predicted time of one allreduce (sum) of `elements` float32 values over `ranks` ranks.

    bandwidth: bytes/s per host link, each direction; alpha: seconds per message; rates:
    elements/s. reduce_rate and copy_rate: the memory work of Horovod's/MPI's own ring for
    fp32/fp16, (P-1)/P n additions and one copy of the input into the output buffer (free by
    default, as on a GPU next to the wire; the q-formats' reduction is in decode_rate).
    intra_*: the link between GPUs of one node (default: the same as the host's).
    alltoall_bandwidth: bytes/s per link that an all-to-all (the two-phase schedule's first
    step) reaches, when measured lower than `bandwidth` (default: the same).
    sum_rate: elements of every part per second of the q-formats' sum of the ranks' parts
    (default: decode_rate, the sum as one decode per part).
    Returns total, wire, latency, codec and memory seconds, bytes_per_rank (all links),
    nic_bytes (out of one node's NIC) and the schedule used.
    """
    m = canonical(method)
    inter = Link("inter", bandwidth, alpha)
    intra = Link("intra", intra_bandwidth or bandwidth, alpha if intra_alpha is None else intra_alpha)
    t = _topo(int(ranks), int(gpus_per_node), inter, intra)
    if alltoall_bandwidth:
        t = replace(t, alltoall_efficiency=min(1.0, alltoall_bandwidth / bandwidth))
    sched = resolve_schedule(m, schedule, t.ranks)
    n = int(elements)
    if t.ranks == 1 or n == 0:
        return dict(total=0.0, wire=0.0, latency=0.0, codec=0.0, memory=0.0, bytes_per_rank=0,
                    nic_bytes=0, schedule=sched)
    if m in UNCOMPRESSED:
        r = (_ring if sched == RING else _hier_ring)(n, UNCOMPRESSED[m], t)
    else:
        fmt = get(m)
        r = {TWO_PHASE: _two_phase, ALLGATHER: _allgather, HIERARCHICAL: _hier_two_phase}[sched](fmt, n, t)
    codec = _div(r.pop("enc"), encode_rate) + _div(r.pop("dec"), decode_rate) + \
        _div(r.pop("sum", 0), decode_rate if sum_rate is None else sum_rate)
    memory = _div(r.pop("red", 0), reduce_rate) + _div(r.pop("copy", 0), copy_rate)
    return dict(total=r["wire"] + r["latency"] + codec + memory, codec=codec, memory=memory,
                schedule=sched, **r)


def pipelined_total(whole: dict, elements: int, piece: int) -> float:
    """Seconds of the allreduce `whole` (from allreduce_time) cut into K pieces of `piece`
    elements, one piece's codec overlapping another's transfer: a two-stage pipeline,
    max(wire, codec) + min(wire, codec) / K, with the per-message latency paid per piece
    (K = 1 gives wire + codec)."""
    n = int(elements)
    if n == 0 or whole["total"] == 0:
        return 0.0
    k = -(-n // int(piece)) if 0 < piece < n else 1
    wire = whole["wire"] + k * whole["latency"]
    return max(wire, whole["codec"]) + min(wire, whole["codec"]) / k + whole["memory"]
