"""Training steps and speedups from the alpha-beta cost of each allreduce (`collective/cost.py`):
one allreduce per fused buffer, the communication the overlap window does not hide, the
speedup over one GPU, and the bandwidth where one method stops paying against another.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, List, Optional, Sequence

from horovod_q8.collective import policy
from horovod_q8.collective.cost import HIERARCHICAL, UNCOMPRESSED, allreduce_time, canonical, label
from horovod_q8.collective.cost import RING, SCHEDULES, pipelined_total  # noqa: F401 (speedup's names)
from horovod_q8.speedup import rates as R
from horovod_q8.speedup.layers import ModelSpec
from horovod_q8.speedup.network import Cluster

FUSION_BYTES = policy.DEFAULT_FUSION_BYTES  # horovod_q8's buckets, every path modelled with them
MIN_SIZE = 1024  # horovod_q8 sends smaller tensors uncompressed
# Fraction of the compute time that communication can hide behind. Backward is about 2/3 of
# forward + backward; gradients become ready uniformly during it, so on average the reduction
# of a gradient can start half-way through backward: 1/2 * 2/3. One value for every case.
OVERLAP = 1 / 3


def buckets(sizes_forward: Sequence[int], bytes_per_element: int,
            fusion_bytes: int = FUSION_BYTES) -> List[int]:
    """Element counts of the fused buffers, in backprop order (last layer's gradients first),
    as `collective.policy.plan_buckets` makes them."""
    sizes = list(sizes_forward)
    members = policy.plan_buckets([(n,) for n in sizes], fusion_bytes, bytes_per_element)
    return [sum(sizes[i] for i in b) for b in members]


@dataclass(frozen=True)
class Setup:
    """Everything but the model and the GPU count.

    codec: a rates preset ("gpu", "cpu", "none"); encode_rate/decode_rate override it.
    schedule: for the q-formats (auto = what horovod_q8 does). hierarchical: Horovod's
    hierarchical allreduce for fp32/fp16 instead of the flat ring.
    """

    cluster: Cluster
    compute_time: float
    overlap: float = OVERLAP
    codec: str = "gpu"
    encode_rate: Optional[float] = None
    decode_rate: Optional[float] = None
    schedule: str = "auto"
    hierarchical: bool = False
    fusion_bytes: int = FUSION_BYTES

    def __post_init__(self) -> None:
        if self.compute_time <= 0 or not 0 <= self.overlap <= 1:
            raise ValueError("compute_time must be > 0 and overlap in [0, 1]")

    def rates(self, method: str) -> tuple:
        enc, dec = R.rates(self.codec, canonical(method))
        if canonical(method) == "none":
            return enc, dec
        return (self.encode_rate or enc), (self.decode_rate or dec)

    def schedule_for(self, method: str) -> str:
        if canonical(method) in UNCOMPRESSED:
            return HIERARCHICAL if self.hierarchical else "auto"
        return self.schedule

    def with_inter_bandwidth(self, bandwidth: float) -> "Setup":
        c = self.cluster
        return replace(self, cluster=replace(c, inter=replace(c.inter, bandwidth=bandwidth)))


def comm_time(method: str, sizes: Sequence[int], ranks: int, setup: Setup) -> dict:
    """One step's gradient reduction: one allreduce per fused buffer, summed."""
    m = canonical(method)
    c = setup.cluster
    enc, dec = setup.rates(m)
    total = dict(total=0.0, wire=0.0, latency=0.0, codec=0.0, bytes_per_rank=0, nic_bytes=0, calls=0)
    for n in buckets(sizes, UNCOMPRESSED.get(m, 4), setup.fusion_bytes):
        small = m not in UNCOMPRESSED and n < MIN_SIZE
        r = allreduce_time("none" if small else m, n, ranks, alpha=c.inter.alpha,
                           bandwidth=c.inter.bandwidth, encode_rate=enc, decode_rate=dec,
                           schedule="auto" if small else setup.schedule_for(m),
                           gpus_per_node=c.gpus_per_node, intra_bandwidth=c.intra.bandwidth,
                           intra_alpha=c.intra.alpha)
        for k in ("total", "wire", "latency", "codec", "bytes_per_rank", "nic_bytes"):
            total[k] += r[k]
        total["calls"] += 1
        total["schedule"] = r["schedule"]
    return total


def step(method: str, model: ModelSpec, ranks: int, setup: Setup) -> dict:
    """Time per step: compute, plus the communication the overlap window does not hide."""
    comm = comm_time(method, model.sizes, ranks, setup) if ranks > 1 else dict(
        total=0.0, wire=0.0, latency=0.0, codec=0.0, bytes_per_rank=0, nic_bytes=0, calls=0)
    exposed = max(0.0, comm["total"] - setup.overlap * setup.compute_time)
    t = setup.compute_time + exposed
    speedup = ranks * setup.compute_time / t
    return dict(method=label(method), gpus=ranks, step=t, compute=setup.compute_time,
                comm=comm["total"], exposed=exposed, wire=comm["wire"], latency=comm["latency"],
                codec=comm["codec"], calls=comm["calls"], bytes_per_rank=comm["bytes_per_rank"],
                schedule=comm.get("schedule", "-"), speedup=speedup, efficiency=speedup / ranks)


def predict(model: ModelSpec, gpus: Iterable[int], methods: Iterable[str], setup: Setup,
            batch: Optional[int] = None) -> List[dict]:
    """One row per (GPU count, method); images/s when the per-GPU batch is known."""
    rows = []
    for p in gpus:
        for m in methods:
            r = step(m, model, p, setup)
            if batch:
                r["images_per_s"] = p * batch / r["step"]
            rows.append(r)
    return rows


def break_even(model: ModelSpec, ranks: int, method: str, reference: str, setup: Setup,
               lo: float = 1e6, hi: float = 1e13, rel: float = 1e-3) -> float:
    """Inter-node bandwidth (bytes/s) above which `method` is no longer at least `rel` faster per
    step than `reference`, by bisection in log space. 0: it never pays; inf: it pays up to `hi`."""
    def pays(bw: float) -> bool:
        s = setup.with_inter_bandwidth(bw)
        return step(method, model, ranks, s)["step"] < step(reference, model, ranks, s)["step"] * (1 - rel)

    if not pays(lo):
        return 0.0
    if pays(hi):
        return math.inf
    a, b = math.log(lo), math.log(hi)
    for _ in range(60):
        mid = (a + b) / 2
        a, b = (mid, b) if pays(math.exp(mid)) else (a, mid)
    return math.exp((a + b) / 2)
