"""Emulated hosts on one Linux machine: a network namespace per host, a veth pair from each
to a bridge in a switch namespace, and `tc` shaping both directions of every host link.

Everything lives inside namespaces this module creates (names start with `hq8-`): the root
namespace's interfaces, addresses and routes are never touched.
"""
from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

HOST_IFACE = "eth0"  # each host's end of its link
PREFIX = "hq8-"
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class ClusterError(RuntimeError):
    """The emulated cluster cannot be made or used (not root, no `ip`/`tc`, bad settings)."""


def parse_rate(text: str) -> float:
    """'1gbit', '10Gbit', '100mbit', '2.5gbit' -> bits per second."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)bit(?:/s)?\s*", text.lower())
    if not m:
        raise ClusterError(f"bandwidth {text!r}: expected a rate like 1gbit, 10gbit, 100mbit")
    bits = float(m.group(1)) * _UNITS[m.group(2)]
    if bits <= 0:
        raise ClusterError(f"bandwidth {text!r} must be positive")
    return bits


def parse_time(text: str) -> float:
    """'50us', '0.1ms', '0' -> seconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(s|ms|us)?\s*", text.lower())
    if not m:
        raise ClusterError(f"latency {text!r}: expected a time like 50us, 0.2ms, 0")
    return float(m.group(1)) * _TIME_UNITS[m.group(2) or "s"]


def require_root() -> None:
    """Namespaces and qdiscs need CAP_NET_ADMIN: say so before anything is made."""
    if os.geteuid() != 0:
        raise ClusterError("the emulated cluster needs root (network namespaces and tc); "
                           "run as root, e.g. `sudo -E horovod-q8 cluster ...`")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ClusterError(f"`{tool}` not found: install iproute2")


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode:
        raise ClusterError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")


def _tc(ns: str, *args: str) -> None:
    proc = subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True, text=True)
    if proc.returncode:
        raise ClusterError(f"`tc {' '.join(args)}` in {ns} failed: {proc.stderr.strip()}")


def existing_namespaces(prefix: str = PREFIX) -> List[str]:
    """Namespaces whose names start with prefix (ours, possibly left by a killed run)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def _kill_inside(ns: str) -> None:
    """SIGKILL every process still running in namespace ns."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    for pid in out.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def remove_namespaces(names: Sequence[str]) -> None:
    """Kill what runs inside, then delete (their veth ends go with them)."""
    for ns in names:
        _kill_inside(ns)
    time.sleep(0.1 if names else 0)
    for ns in names:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@dataclass
class Cluster:
    """P hosts hq8-<tag>-h<i> with addresses subnet.1 .. subnet.P behind one switch.

    bandwidth: bits/s of each host's link, applied in both directions (a full-duplex NIC);
    latency: one-way host-to-host delay in seconds, half on each side of the switch.
    """

    hosts: int
    bandwidth: Optional[float] = None
    latency: float = 0.0
    subnet: str = "10.99.0.0/24"
    tag: str = field(default_factory=lambda: str(os.getpid()))

    def __post_init__(self) -> None:
        if self.hosts < 1:
            raise ClusterError(f"need at least one host, got {self.hosts}")
        net = ipaddress.ip_network(self.subnet)
        if self.hosts > net.num_addresses - 2:
            raise ClusterError(f"{self.hosts} hosts do not fit in {self.subnet}")
        self._net = net
        self._made: List[str] = []

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.tag}-sw"

    def namespace(self, i: int) -> str:
        return f"{PREFIX}{self.tag}-h{i}"

    def address(self, i: int) -> str:
        return str(self._net.network_address + i + 1)

    @property
    def addresses(self) -> List[str]:
        return [self.address(i) for i in range(self.hosts)]

    def up(self) -> "Cluster":
        """Make namespaces, links and qdiscs; on any failure undo what was made."""
        require_root()
        present = set(existing_namespaces())
        clash = [n for n in [self.switch] + [self.namespace(i) for i in range(self.hosts)]
                 if n in present]
        if clash:
            raise ClusterError(f"namespaces already exist: {clash}; `horovod-q8 cluster --cleanup`")
        try:
            self._make()
        except BaseException:
            self.down()
            raise
        return self

    def _make(self) -> None:
        sw = self.switch
        _ip("netns", "add", sw)
        self._made.append(sw)
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        prefix = self._net.prefixlen
        for i in range(self.hosts):
            ns = self.namespace(i)
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "add", HOST_IFACE, "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", sw)
            _ip("-n", sw, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", sw, "link", "set", f"p{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/{prefix}", "dev", HOST_IFACE)
            _ip("-n", ns, "link", "set", HOST_IFACE, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self._shape(ns, HOST_IFACE)      # host -> switch: what the host sends
            self._shape(sw, f"p{i}")     # switch -> host: what the host receives

    def _shape(self, ns: str, dev: str) -> None:
        """netem for delay (if any) with tbf below it for the rate (if any)."""
        parent = ["root"]
        if self.latency > 0:
            try:
                _tc(ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
                    "delay", f"{self.latency / 2 * 1e6:.1f}us", "limit", "100000")
            except ClusterError as e:
                if "unknown" in str(e):
                    raise ClusterError("this kernel has no netem qdisc (sch_netem): added latency "
                                       "cannot be emulated here; run with --latency 0") from e
                raise
            parent = ["parent", "1:"]
        if self.bandwidth:
            # burst: at least 1 ms of traffic and a full 64 KB GSO segment
            burst = max(int(self.bandwidth / 8 / 1000), 128 * 1024)
            _tc(ns, "qdisc", "add", "dev", dev, *parent, "handle", "2:", "tbf",
                "rate", f"{int(self.bandwidth)}bit", "burst", str(burst), "latency", "200ms")

    def down(self) -> None:
        """Remove everything this cluster made; safe to call twice."""
        remove_namespaces(list(reversed(self._made)))
        self._made.clear()

    def __enter__(self) -> "Cluster":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()
