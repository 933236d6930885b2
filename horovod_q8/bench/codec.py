"""`horovod-q8 bench codec`: the CPU codec beside a float32 copy of the same tensor.

For each format, in one run: encode ms, decode ms, decode-and-accumulate ms (`out +=`, as the
allreduce uses it), the time of `np.copyto` of the same float32 tensor into a preallocated
buffer, and the ratio (encode + decode) / copy. Rows for one thread (the serial kernels and
the parallel kernels on one thread) and for every thread. Timings are interleaved, one call of
each per round, and the median of the rounds is reported, so that drift hits every column alike.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional

import numpy as np

from horovod_q8.formats import Format, get, names

DEFAULT_FORMATS = "q8,q4,twobit,q4_threshold"


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench codec", description=__doc__)
    p.add_argument("--elements", type=int, default=25_600_000, help="float32 elements in the tensor")
    p.add_argument("--repeats", type=int, default=7, help="rounds; the median is reported")
    p.add_argument("--formats", default=DEFAULT_FORMATS,
                   help=f"comma-separated format names, or 'all' (default {DEFAULT_FORMATS})")
    p.add_argument("--threads", default="1,all",
                   help="comma-separated thread counts for the parallel kernels ('all' = every Numba "
                        "thread); a count of 1 also times the serial kernels")
    p.add_argument("--no-residual", action="store_true",
                   help="time threshold formats only without error feedback (default: with and without)")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    p.add_argument("--check-reciprocal", action="store_true",
                   help="also count the codes that x * (1/scale) would change against the spec's x / scale")
    return p


def reciprocal_differences(x: np.ndarray, fmt: Format) -> tuple:
    """(quotients, codes) of x that differ when x / scale is replaced by x * (1 / scale) (nearest)."""
    from horovod_q8.formats import codebooks
    from horovod_q8.formats import reference as R

    t = codebooks.tables(fmt.codebook, fmt.bits)
    block = fmt.block_for(x.size)
    s = np.repeat(R.block_scales(x, block), block)[: x.size]
    with np.errstate(divide="ignore", invalid="ignore"):
        divided, multiplied = x / s, x * (np.float32(1) / s)
    mids = t.mids[: t.size - 1]
    codes_differ = np.count_nonzero(np.searchsorted(mids, divided) != np.searchsorted(mids, multiplied))
    return int(np.count_nonzero(divided != multiplied)), int(codes_differ)


def median_times(ops: Dict[str, Callable[[], object]], repeats: int) -> Dict[str, float]:
    """Median seconds of each op, the ops called in turn once per round after one warm-up round."""
    times: Dict[str, List[float]] = {k: [] for k in ops}
    for r in range(repeats + 1):
        for k, fn in ops.items():
            t = time.perf_counter()
            fn()
            if r:
                times[k].append(time.perf_counter() - t)
    return {k: float(np.median(v)) for k, v in times.items()}


@contextlib.contextmanager
def kernels(variant: str, threads: int) -> Iterator[None]:
    """Force the serial or the parallel Numba kernels, the latter on `threads` threads."""
    import numba

    from horovod_q8.backends import cpu_kernels as K

    saved_min, saved_threads = K.PARALLEL_MIN, numba.get_num_threads()
    K.PARALLEL_MIN = 0 if variant == "parallel" else sys.maxsize
    numba.set_num_threads(threads)
    try:
        yield
    finally:
        K.PARALLEL_MIN = saved_min
        numba.set_num_threads(saved_threads)


def format_ops(fmt: Format, x: np.ndarray, residual: bool) -> Dict[str, Callable[[], object]]:
    """encode / decode / decode+accumulate of x through the CPU backend, buffers preallocated."""
    from horovod_q8.backends import cpu

    n = x.size
    buf = cpu.encode(x, fmt, residual=np.zeros(n, np.float32) if fmt.uses_residual else None)
    r = np.zeros(n, np.float32) if (fmt.uses_residual and residual) else None
    out, acc = np.empty(n, np.float32), np.zeros(n, np.float32)
    return {"encode": lambda: cpu.encode(x, fmt, residual=r, out=buf),
            "decode": lambda: cpu.decode(buf, fmt, n, out=out),
            "decode_acc": lambda: cpu.decode(buf, fmt, n, out=acc, accumulate=True)}


def cases(fmts: List[Format], residual: bool) -> List[tuple]:
    """(label, format, with residual) to time: threshold formats with and without error feedback."""
    out = []
    for f in fmts:
        if f.uses_residual and residual:
            out.append((f"{f.name} +residual", f, True))
        out.append((f.name, f, False))
    return out


def measure(entries: List[tuple], x: np.ndarray, variant: str, threads: int, repeats: int) -> List[dict]:
    """One row per entry: ms of each op and of the copy, and the ratios to the copy."""
    y = np.empty_like(x)
    ops: Dict[str, Callable[[], object]] = {"copy": lambda: np.copyto(y, x)}
    for label, f, residual in entries:
        ops.update({f"{label}/{k}": fn for k, fn in format_ops(f, x, residual).items()})
    with kernels(variant, threads):
        t = median_times(ops, repeats)
    rows = []
    for label, f, residual in entries:
        enc, dec, acc = (t[f"{label}/{k}"] for k in ("encode", "decode", "decode_acc"))
        rows.append(dict(format=label, residual=residual, variant=variant, threads=threads,
                         encode_ms=enc * 1e3, decode_ms=dec * 1e3, decode_acc_ms=acc * 1e3,
                         copy_ms=t["copy"] * 1e3, ratio=(enc + dec) / t["copy"],
                         ratio_acc=(enc + acc) / t["copy"]))
    return rows


def settings(args: argparse.Namespace) -> List[tuple]:
    """(variant, threads) pairs to time: serial and parallel on one thread, parallel on more."""
    import numba

    counts = [numba.config.NUMBA_NUM_THREADS if c.strip() == "all" else int(c)
              for c in args.threads.split(",")]
    out: List[tuple] = []
    for c in dict.fromkeys(counts):
        out += [("serial", 1), ("parallel", 1)] if c == 1 else [("parallel", c)]
    return out


def resolve_formats(spec: str, n: int) -> List[Format]:
    chosen = [m for m in names() if m != "q8_dynamic_tree"] if spec == "all" else spec.split(",")
    return [get(m.strip()).for_shape((n,)) for m in chosen]


def run(args: argparse.Namespace) -> None:
    import numba

    from horovod_q8.bench.common import machine, markdown

    x = np.random.default_rng(0).standard_normal(args.elements).astype(np.float32)
    fmts = resolve_formats(args.formats, x.size)
    entries = cases(fmts, not args.no_residual)
    rows: List[dict] = []
    for variant, threads in settings(args):
        rows += measure(entries, x, variant, threads, args.repeats)
    head = (f"# codec benchmark: {x.size} float32 ({x.nbytes / 1e6:.0f} MB, Gaussian), median of "
            f"{args.repeats} interleaved rounds; {machine()}; numba {numba.__version__}, "
            f"{numba.config.NUMBA_NUM_THREADS} Numba threads")
    print(head)
    print("# threshold formats: '+residual' rows with error feedback (x and the residual read, the "
          "residual written: one more stream than a copy), the others without")
    print("# ratio = (encode + decode) / copy; ratio_acc = (encode + decode_acc) / copy; "
          "copy = np.copyto into a preallocated float32 buffer (one thread)\n")
    header = ["format", "kernels", "threads", "encode ms", "decode ms", "decode+acc ms", "copy ms",
              "ratio", "ratio_acc"]
    print(markdown(header, [[r["format"], r["variant"], r["threads"], r["encode_ms"], r["decode_ms"],
                             r["decode_acc_ms"], r["copy_ms"], r["ratio"], r["ratio_acc"]] for r in rows]))
    if args.check_reciprocal:
        print("\n# x * (1/scale) instead of the spec's x / scale (blocks of 1024, nearest):")
        for f in fmts:
            if f.kind == "codebook":
                quotients, codes = reciprocal_differences(x, f)
                print(f"# {f.name}: {quotients} of {x.size} quotients and {codes} codes differ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(command=" ".join(sys.argv), machine=machine(), numba=numba.__version__,
                           elements=x.size, repeats=args.repeats, rows=rows), f, indent=1)


def main(argv=None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
