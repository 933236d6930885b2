"""`horovod-q8 bench transfer` (mpi4py, under mpirun or `horovod-q8 cluster`): Dettmers'
data-transfer measurement and the numbers the speedup model needs.

- link: latency alpha (half a small ping-pong) and bandwidth beta (a large one-way send);
- codec: encode and decode rates (elements/s) with every rank coding at once;
- p2p: rank 0 compresses the gradient, sends it, rank 1 decompresses (Dettmers' transfer);
- allreduce: the whole reduction, phases timed. fp32 twice: OpenMPI's MPI_Allreduce (`none`)
  and the same ring in mpi4py over reused buffers (`none_ring`); fp16 as Horovod's fp16
  compression does it (cast, ring with float16 sums taken in float32, cast back) at F16C-like
  speed; horovod_q8's schedule for the compressed formats (codes are never summed).
"""
from __future__ import annotations

import argparse
import json
import time
import zlib
from typing import Callable, Dict, List, Optional

import numpy as np

from horovod_q8.bench.common import barrier_median
from horovod_q8.bench.pipelined import product_sum, whole_method
from horovod_q8.bench.ring import ring_allreduce
from horovod_q8.collective.mpi import MpiTransport
from horovod_q8.collective.transport import Buffers

DEFAULT = "none,none_ring,fp16,q8,q8/p,q8_linear,q4,q4/p,q4_threshold,twobit"
UNCOMPRESSED = ("none", "none_ring", "fp16")


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench transfer", description=__doc__)
    p.add_argument("--elements", type=int, default=25_600_000, help="gradient size (ResNet-50: 25.6M)")
    p.add_argument("--compressions", default=DEFAULT)
    p.add_argument("--repeats", type=int, default=5, help="timed calls per measurement (median)")
    p.add_argument("--pipeline-elements", type=int, default=4 << 20,
                   help="piece size of the pipelined methods (names ending in /p)")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure everything this many times, methods interleaved; report medians")
    p.add_argument("--json", default=None, help="rank 0 writes every measurement here")
    return p


def _median(fn: Callable[[], Dict[str, float]], comm, repeats: int) -> Dict[str, float]:
    """Run fn (which returns phase durations) after a barrier; per phase the slowest rank's
    time, then the median over repeats (one warm-up run first)."""
    from mpi4py import MPI

    runs = []
    for i in range(repeats + 1):
        comm.Barrier()
        t = time.perf_counter()
        phases = fn()
        phases["total"] = time.perf_counter() - t
        slowest = {k: comm.allreduce(v, op=MPI.MAX) for k, v in phases.items()}
        if i:
            runs.append(slowest)
    return {k: float(np.median([r[k] for r in runs])) for k in runs[0]}


def measure_link(comm, sizes=(8, 1 << 20, 16 << 20), repeats: int = 20) -> Dict[str, float]:
    """Ping-pong between ranks 0 and 1: alpha from the smallest message, beta from the largest."""
    rank = comm.Get_rank()
    half_rtt = {}
    for n in sizes:
        buf = np.zeros(n, np.uint8)
        times = []
        for _ in range(repeats if n < (1 << 20) else max(3, repeats // 5)):
            comm.Barrier()
            t = time.perf_counter()
            if rank == 0:
                comm.Send(buf, 1)
                comm.Recv(buf, 1)
            elif rank == 1:
                comm.Recv(buf, 0)
                comm.Send(buf, 0)
            times.append((time.perf_counter() - t) / 2)
        half_rtt[n] = float(np.median(times))
    half_rtt = comm.bcast(half_rtt, root=0)
    alpha = half_rtt[sizes[0]]
    big = sizes[-1]
    return {"alpha_s": alpha, "bandwidth_Bps": big / max(half_rtt[big] - alpha, 1e-12),
            "ring_bandwidth_Bps": ring_bandwidth(comm, big),
            "alltoall_bandwidth_Bps": alltoall_bandwidth(comm, big),
            "half_rtt_s": {str(k): v for k, v in half_rtt.items()}}


def ring_bandwidth(comm, n: int, repeats: int = 5) -> float:
    """Bytes/s per link when every rank sends n bytes to the next while receiving from the
    previous: links loaded in both directions at once, as in a collective."""
    rank, size = comm.Get_rank(), comm.Get_size()
    out, into = np.zeros(n, np.uint8), np.empty(n, np.uint8)
    return n / barrier_median(comm, lambda: comm.Sendrecv(out, (rank + 1) % size, recvbuf=into,
                                                          source=(rank - 1) % size), repeats)


def alltoall_bandwidth(comm, n: int, repeats: int = 5) -> float:
    """Bytes/s each rank sends when every rank sends n bytes in all, split evenly over the
    others, with MPI_Alltoall: the link under the two-phase schedule's first step."""
    size = comm.Get_size()
    per = max(n // max(size - 1, 1), 1)
    out, into = np.zeros(per * size, np.uint8), np.empty(per * size, np.uint8)
    return per * (size - 1) / barrier_median(comm, lambda: comm.Alltoall(out, into), repeats)


class Reducers:
    """One allreduce per method, each returning its phase timings; `result` keeps the output.

    Every buffer is allocated on a method's first (warm-up) call and reused after, as Horovod
    reuses its fusion buffer: the timed calls pay no page faults for fresh memory. The
    compressed methods run the product's engine (`bench.pipelined.product_sum`).
    """

    def __init__(self, comm, x: np.ndarray):
        self.comm, self.x = comm, x
        self.result: Optional[np.ndarray] = None
        self.buffer = Buffers()
        self._transports: Dict[bool, MpiTransport] = {}

    def none(self) -> Dict[str, float]:
        from mpi4py import MPI
        out = self.buffer("out", self.x.size, np.float32)
        t = time.perf_counter()
        self.comm.Allreduce(self.x, out, op=MPI.SUM)
        self.result = out
        return {"wire": time.perf_counter() - t}

    def none_ring(self) -> Dict[str, float]:
        """fp32: OpenMPI's algorithm in mpi4py, the input copied into the output first."""
        n = self.x.size
        out = self.buffer("out", n, np.float32)
        t = time.perf_counter()
        np.copyto(out, self.x)
        copy = time.perf_counter() - t
        wire, adds = ring_allreduce(self.comm, out, self.buffer("ring_recv", -(-n // self.comm.Get_size()),
                                                                 np.float32), _add_float32)
        self.result = out
        return {"wire": wire, "memory": copy + adds}

    def fp16(self) -> Dict[str, float]:
        """Horovod's fp16: cast to float16, ring with float16 sums, cast back."""
        n = self.x.size
        h, result = self.buffer("half", n, np.float16), self.buffer("out", n, np.float32)
        t0 = time.perf_counter()
        _half().to_half(self.x, out=h)
        t1 = time.perf_counter()
        wire, adds = ring_allreduce(self.comm, h, self.buffer("half_recv", -(-n // self.comm.Get_size()),
                                                              np.float16), _half().add_into)
        t2 = time.perf_counter()
        _half().to_float(h, out=result)
        self.result = result
        return {"codec": (t1 - t0) + (time.perf_counter() - t2), "wire": wire, "memory": adds}

    def compressed(self, name: str, piece: int = 0) -> Dict[str, float]:
        """The engine's schedule; in pieces with a codec thread next to the MPI thread."""
        pipelined = piece > 0
        if pipelined not in self._transports:
            self._transports[pipelined] = MpiTransport(self.comm, self.buffer, codec_thread=pipelined)
        self.result, phases = product_sum(self._transports[pipelined], self.x, name, piece)
        return phases


def p2p(comm, x: np.ndarray, name: str, buffer: Callable) -> Dict[str, float]:
    """Rank 0 compresses and sends the whole gradient; rank 1 receives and decompresses,
    into buffers from `buffer(key, size, dtype)` that persist across repeats."""
    from horovod_q8.backends import cpu
    from horovod_q8.formats import get

    rank = comm.Get_rank()
    t0 = time.perf_counter()
    if name in UNCOMPRESSED:
        dtype = np.float16 if name == "fp16" else np.float32
        if rank == 0:
            if dtype == np.float32:
                comm.Send(x.view(np.uint8), 1)
            else:
                comm.Send(_half().to_half(x, out=buffer("p2p_half", x.size, dtype)).view(np.uint8), 1)
        elif rank == 1:
            buf = buffer("p2p_recv", x.size, dtype)
            comm.Recv(buf.view(np.uint8), 0)
            if name == "fp16":
                _half().to_float(buf, out=buffer("p2p_out", x.size, np.float32))
    else:
        fmt = get(name).for_group("dense")
        buf = buffer("p2p_codes", fmt.nbytes(x.size), np.uint8)
        if rank == 0:
            comm.Send(cpu.encode(x, fmt, out=buf), 1)
        elif rank == 1:
            comm.Recv(buf, 0)
            cpu.decode(buf, fmt, x.size, out=buffer("p2p_out", x.size, np.float32))
    return {"p2p": time.perf_counter() - t0}


def codec_rates(comm, x: np.ndarray, name: str, repeats: int) -> Dict[str, float]:
    """Elements per second, into buffers reused across calls, in the concurrency of each use:
    encode_rate and decode_rate (decoding adds into a float32 sum) with every rank coding at
    once, as in the allreduce; *_alone with one rank coding while the others wait, as in the
    p2p transfer (rank 0 encodes, rank 1 decodes without adding)."""
    from horovod_q8.backends import cpu
    from horovod_q8.formats import get

    n = x.size
    if name in ("none", "none_ring"):
        return dict(_uncompressed_rates(comm, x, name, repeats), encode_rate=float("inf"),
                    decode_rate=float("inf"), encode_rate_alone=float("inf"),
                    decode_rate_alone=float("inf"))
    if name == "fp16":
        h, f32 = _half().to_half(x), np.empty_like(x)
        encode = lambda: _half().to_half(x, out=h)  # noqa: E731
        decode = add = lambda: _half().to_float(h, out=f32)  # noqa: E731
        out = _uncompressed_rates(comm, x, name, repeats)
    else:
        fmt = get(name).for_group("dense")
        buf, total = cpu.encode(x, fmt), np.zeros_like(x)
        encode = lambda: cpu.encode(x, fmt, out=buf)  # noqa: E731
        decode = lambda: cpu.decode(buf, fmt, n, out=total)  # noqa: E731
        add = lambda: cpu.decode(buf, fmt, n, out=total, accumulate=True)  # noqa: E731
        out = {}
    return dict(out, encode_rate=n / _time(comm, encode, repeats),
                decode_rate=n / _time(comm, add, repeats),
                encode_rate_alone=n / _time(comm, encode, repeats, only=0),
                decode_rate_alone=n / _time(comm, decode, repeats, only=1 % comm.Get_size()))


def _time(comm, fn: Callable, repeats: int, only: Optional[int] = None) -> float:
    """Median seconds of fn on every rank at once (the slowest rank), or on rank `only` alone."""
    rank = comm.Get_rank()
    return _median(lambda: {"t": _timed(fn) if only is None or rank == only else 0.0}, comm, repeats)["t"]


def _uncompressed_rates(comm, x: np.ndarray, name: str, repeats: int) -> Dict[str, float]:
    """What a ring does besides the wire, in elements/s with all ranks at once: add a received
    segment into the sum (reduce_rate: float32 adds, or float16 adds taken in float32) and, for
    fp32, copy the input into the output buffer (copy_rate; fp16's cast writes its buffer)."""
    if name == "fp16":
        a = _half().to_half(x)
        b = a.copy()
        return {"reduce_rate": x.size / _time(comm, lambda: _half().add_into(a, b), repeats)}
    b = np.ones_like(x)
    return {"copy_rate": x.size / _time(comm, lambda: np.copyto(b, x), repeats),
            "reduce_rate": x.size / _time(comm, lambda: _add_float32(x, b), repeats)}


def _half():
    """The fp16 baseline kernels (Numba), loaded when a method needs them."""
    from horovod_q8.bench import half
    return half


def _add_float32(received: np.ndarray, into: np.ndarray) -> None:
    np.add(into, received, out=into)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def identical_on_every_rank(comm, result: np.ndarray) -> bool:
    digest = zlib.crc32(result.tobytes())
    return len(set(comm.allgather(digest))) == 1


def run(args: argparse.Namespace) -> dict:
    from mpi4py import MPI

    from horovod_q8.bench.common import machine, markdown

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    x = np.random.default_rng(rank).standard_normal(args.elements).astype(np.float32)
    exact = np.empty_like(x)
    comm.Allreduce(x, exact, op=MPI.SUM)
    names: List[str] = args.compressions.split(",")
    report: dict = {"ranks": size, "elements": args.elements, "machine": machine(), "methods": {},
                    "rounds": args.rounds, "pipeline_elements": args.pipeline_elements}
    reducers = Reducers(comm, x)
    links, rows = [], {name: [] for name in names}
    for _ in range(args.rounds):  # rounds interleave the methods: a slow spell hits them all
        if size >= 2:
            links.append(measure_link(comm))
        for name in names:
            base = whole_method(name)
            if base != name:
                fn = lambda b=base: reducers.compressed(b, args.pipeline_elements)  # noqa: E731
            elif name in UNCOMPRESSED:
                fn = getattr(reducers, name)
            else:
                fn = lambda n=name: reducers.compressed(n)  # noqa: E731
            row = _median(fn, comm, args.repeats)
            err = float(np.abs(reducers.result - exact).max() / np.abs(exact).max())
            row.update(rel_max_error=err, identical=identical_on_every_rank(comm, reducers.result))
            if base != name and rows.get(base):  # same codec and p2p as the whole-tensor schedule
                row.update({k: v for k, v in rows[base][-1].items() if k == "p2p" or k.endswith("rate")
                            or k.endswith("rate_alone")})
                rows[name].append(row)
                continue
            if size >= 2:
                row["p2p"] = _median(lambda n=name: p2p(comm, x, n, reducers.buffer), comm, args.repeats)["p2p"]
            row.update(codec_rates(comm, x, base, args.repeats))
            rows[name].append(row)
    if links:
        report["link"] = median_of(links)
    for name, runs in rows.items():
        report["methods"][name] = dict(median_of(runs), identical=all(r["identical"] for r in runs),
                                       total_by_round=[r["total"] for r in runs])
    if rank == 0:
        _print(report, markdown)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    return report


def median_of(runs: List[dict]) -> dict:
    """Per key, the median over runs of numbers (recursing into dicts); other values from the first."""
    out = {}
    for k, v in runs[0].items():
        if isinstance(v, dict):
            out[k] = median_of([r[k] for r in runs])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(np.median([r[k] for r in runs]))
        else:
            out[k] = v
    return out


def _print(report: dict, markdown) -> None:
    m = report["methods"]
    fp32 = [m[k] for k in ("none", "none_ring") if k in m]
    base = min(fp32, key=lambda r: r["total"]) if fp32 else None  # the best fp32 configuration
    fp16 = m.get("fp16")
    print(f"# transfer benchmark: {report['ranks']} ranks, {report['elements']} float32 elements\n"
          f"machine: {report['machine']}")
    if "link" in report:
        link = report["link"]
        print(f"link: alpha {link['alpha_s'] * 1e6:.0f} us, bandwidth "
              f"{link['bandwidth_Bps'] * 8 / 1e9:.3f} Gbit/s (ping-pong ranks 0-1), "
              f"{link['ring_bandwidth_Bps'] * 8 / 1e9:.3f} Gbit/s per link with every rank "
              f"sending and receiving, {link['alltoall_bandwidth_Bps'] * 8 / 1e9:.3f} in an "
              f"alltoall\n")
    rows = []
    for name, r in m.items():
        rows.append([name, r["total"] * 1e3, r.get("wire", 0) * 1e3, r.get("codec", 0) * 1e3,
                     base["total"] / r["total"] if base else "", fp16["total"] / r["total"] if fp16 else "",
                     r.get("p2p", 0) * 1e3, base["p2p"] / r["p2p"] if base and "p2p" in r else "",
                     r["rel_max_error"], "yes" if r["identical"] else "NO"])
    print(markdown(["method", "allreduce ms", "wire ms", "codec ms", "vs fp32", "vs fp16",
                    "p2p ms", "p2p vs fp32", "max rel err", "bit-identical"], rows), flush=True)


def main(argv=None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
