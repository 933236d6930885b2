"""Links and clusters for the speedup model: bandwidth (bytes/s, each direction) and latency.

Bandwidths are nominal line rates (what the preset's name says), not measured goodput;
latencies are typical per-message costs of MPI/NCCL on that kind of link.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from horovod_q8.collective.cost import GBIT, Link  # noqa: F401 (speedup.network.Link)


# name: (Gbit/s, alpha in microseconds). Ethernet below 25 GbE is assumed to be TCP, 25 GbE and
# up RoCE-class; InfiniBand 4x data rates after encoding overhead.
PRESETS: dict[str, tuple[float, float]] = {
    "1gbe": (1, 50), "10gbe": (10, 20), "25gbe": (25, 10), "40gbe": (40, 10), "50gbe": (50, 10),
    "100gbe": (100, 5), "ib-qdr": (32, 2), "ib-fdr": (54.5, 2), "ib-edr": (100, 2),
    "ib-hdr": (200, 2), "ib-ndr": (400, 2),
    "pcie3": (126, 2), "pcie4": (252, 2), "pcie5": (504, 2),  # x16, 15.75/31.5/63 GB/s
    "nvlink-p100": (640, 2), "nvlink-v100": (1200, 2), "nvlink-a100": (2400, 2),
    "nvlink-h100": (3600, 2),  # per GPU, all links: 80/150/300/450 GB/s
}
ALIASES = {"nvlink": "nvlink-v100", "pcie": "pcie3"}


def link(spec: str, alpha_us: float | None = None) -> Link:
    """A preset name ("25gbe", "ib-edr", "nvlink"), or "<number>gbit" / "<number>gbyte"."""
    key = ALIASES.get(spec.lower(), spec.lower())
    if key in PRESETS:
        gbit, a = PRESETS[key]
        return Link(key, gbit * GBIT, (a if alpha_us is None else alpha_us) * 1e-6)
    m = re.fullmatch(r"([0-9.eE+-]+)\s*(gbit|gbyte|gb/s|gbit/s)", key)
    if not m:
        raise ValueError(f"unknown link {spec!r}: a preset ({', '.join(PRESETS)}) or e.g. '25gbit'")
    value = float(m.group(1)) * (GBIT if m.group(2).startswith("gbit") else 1e9)
    return Link(key, value, (10.0 if alpha_us is None else alpha_us) * 1e-6)


@dataclass(frozen=True)
class Cluster:
    """gpus_per_node GPUs share one `inter` NIC per node and talk to each other over `intra`."""

    inter: Link
    intra: Link
    gpus_per_node: int = 1

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ValueError("gpus_per_node must be >= 1")
