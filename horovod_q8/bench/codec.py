"""`horovod-q8 bench codec`: the CPU codec beside a float32 copy of the same tensor.

For each format, in one run: encode ms, decode ms, decode-and-accumulate ms (`out +=`, as the
allreduce uses it), the sum of 2 ranks' codes in one pass (`decode_sum`, as a rank reduces
what it received), the time of `np.copyto` of the same float32 tensor into a preallocated
buffer, and the ratios (encode + decode) / copy and sum of 2 / copy. Rows for one thread (the serial kernels and
the parallel kernels on one thread) and for every thread; with --baseline REV also the CPU
backend of that git revision, timed in the same rounds. Timings are interleaved, one call of
each op per round, and the median (or with --stat min the best) of the rounds is reported, so
that drift hits every column alike; on a machine shared with other jobs, or whose clock
varies, the best round is the steadier estimate.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from horovod_q8.formats import Format, get, names

DEFAULT_FORMATS = "q8,q4,twobit,q4_threshold"
HERE = "this tree"
Backend = Tuple[str, ModuleType, ModuleType]  # (label, backend module, its kernels module)


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench codec", description=__doc__)
    p.add_argument("--elements", type=int, default=25_600_000, help="float32 elements in the tensor")
    p.add_argument("--repeats", type=int, default=7, help="rounds; the median (or the best) is reported")
    p.add_argument("--stat", choices=("median", "min"), default="median",
                   help="per-op statistic over the rounds (min: the best round, for a shared machine)")
    p.add_argument("--formats", default=DEFAULT_FORMATS,
                   help=f"comma-separated format names, or 'all' (default {DEFAULT_FORMATS})")
    p.add_argument("--threads", default="1,all",
                   help="comma-separated thread counts for the parallel kernels ('all' = every Numba "
                        "thread); a count of 1 also times the serial kernels")
    p.add_argument("--no-residual", action="store_true",
                   help="time threshold formats only without error feedback (default: with and without)")
    p.add_argument("--baseline", default=None, metavar="REV",
                   help="also time the CPU backend of this git revision of the checkout, in the same rounds")
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


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def baseline_backend(rev: str) -> Backend:
    """The CPU backend (backends/cpu.py, cpu_kernels.py and, where it has them, numba_vectors.py
    and native.py with its kernels/ sources) of git revision `rev`, importable beside this tree's:
    written to a temporary folder, its imports pointed at its own copies."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout

    def show(path: str) -> str:
        return git("show", f"{rev}:{path}")

    folder = Path(tempfile.mkdtemp(prefix="hq8-baseline-"))
    kernels_source = show("horovod_q8/backends/cpu_kernels.py")
    if "horovod_q8/backends/numba_vectors.py" in git("ls-tree", "-r", "--name-only", rev, "horovod_q8/backends"):
        # its hand-vectorised steps too, not this tree's
        (folder / "hq8_baseline_vectors.py").write_text(show("horovod_q8/backends/numba_vectors.py"))
        _load("hq8_baseline_vectors", folder / "hq8_baseline_vectors.py")
        kernels_source = kernels_source.replace("from horovod_q8.backends.numba_vectors import",
                                                "from hq8_baseline_vectors import")
    (folder / "hq8_baseline_kernels.py").write_text(kernels_source)
    kernels_mod = _load("hq8_baseline_kernels", folder / "hq8_baseline_kernels.py")
    source = show("horovod_q8/backends/cpu.py")
    line = "from horovod_q8.backends import cpu_kernels as K"
    if line not in source:
        raise SystemExit(f"--baseline {rev}: its backends/cpu.py does not import its kernels as expected")
    source = source.replace(line, "import hq8_baseline_kernels as K")
    if "horovod_q8/backends/native.py" in git("ls-tree", "-r", "--name-only", rev, "horovod_q8/backends"):
        _baseline_native(rev, folder, show, git)
        # the revision's cpu.py must call its own native kernels, not this tree's
        source = re.sub(r"^from horovod_q8\.backends import (.*)\bnative\b(.*)$",
                        lambda m: f"from horovod_q8.backends import {(m[1] + m[2]).strip(' ,')}\n"
                                  "import hq8_baseline_native as native", source, flags=re.M)
        source = source.replace("from horovod_q8.backends import \n", "")
    (folder / "hq8_baseline_cpu.py").write_text(source)
    return rev, _load("hq8_baseline_cpu", folder / "hq8_baseline_cpu.py"), kernels_mod


def _baseline_native(rev: str, folder: Path, show, git) -> None:
    """The revision's native.py as module hq8_baseline_native, reading the revision's kernels/."""
    kernels_dir = folder / "kernels"
    kernels_dir.mkdir()
    for path in git("ls-tree", "-r", "--name-only", rev, "kernels").split():
        (kernels_dir / Path(path).name).write_text(show(path))
    source = show("horovod_q8/backends/native.py")
    line = next((f"from horovod_q8.backends{m} import kernel_source" for m in (".common", "")
                 if f"from horovod_q8.backends{m} import kernel_source\n" in source), None)
    if line is None:
        raise SystemExit(f"--baseline {rev}: its backends/native.py does not import kernel_source as expected")
    source = source.replace(line, f"def kernel_source(name):\n    return open({str(kernels_dir)!r} + '/' + name).read()")
    (folder / "hq8_baseline_native.py").write_text(source)
    _load("hq8_baseline_native", folder / "hq8_baseline_native.py")


@contextlib.contextmanager
def kernels(variant: str, threads: int, modules: List[ModuleType]) -> Iterator[None]:
    """Force the serial or the parallel Numba kernels of these modules, on `threads` threads."""
    import numba

    saved = [(m.PARALLEL_MIN, getattr(m, "THREADS", None)) for m in modules], numba.get_num_threads()
    for m in modules:
        m.PARALLEL_MIN = 0 if variant == "parallel" else sys.maxsize
        m.THREADS = threads  # this tree's kernels take their count from it (a baseline's from Numba)
    numba.set_num_threads(threads)
    try:
        yield
    finally:
        for m, (least, count) in zip(modules, saved[0]):
            m.PARALLEL_MIN, m.THREADS = least, count
        numba.set_num_threads(saved[1])


def round_times(ops: Dict[str, Callable[[], object]], repeats: int, stat: str = "median") -> Dict[str, float]:
    """Seconds of each op (median or min over rounds), the ops called in turn once per round
    after one warm-up round."""
    times: Dict[str, List[float]] = {k: [] for k in ops}
    for r in range(repeats + 1):
        for k, fn in ops.items():
            t = time.perf_counter()
            fn()
            if r:
                times[k].append(time.perf_counter() - t)
    reduce = np.min if stat == "min" else np.median
    return {k: float(reduce(v)) for k, v in times.items()}


def format_ops(be: ModuleType, fmt: Format, x: np.ndarray, residual: bool) -> Dict[str, Callable[[], object]]:
    """encode / decode / decode+accumulate / sum of 2 ranks (where the backend has decode_sum) of
    x through a CPU backend, buffers preallocated."""
    n = x.size
    buf = be.encode(x, fmt, residual=np.zeros(n, np.float32) if fmt.uses_residual else None)
    other = be.encode(x[::-1].copy(), fmt, residual=np.zeros(n, np.float32) if fmt.uses_residual else None)
    r = np.zeros(n, np.float32) if (fmt.uses_residual and residual) else None
    out, acc = np.empty(n, np.float32), np.zeros(n, np.float32)
    ops = {"encode": lambda: be.encode(x, fmt, residual=r, out=buf),
           "decode": lambda: be.decode(buf, fmt, n, out=out),
           "decode_acc": lambda: be.decode(buf, fmt, n, out=acc, accumulate=True)}
    if hasattr(be, "decode_sum"):
        ops["sum2"] = lambda: be.decode_sum([buf, other], fmt, n, out)
    return ops


def cases(fmts: List[Format], residual: bool, backends: List[Backend]) -> List[tuple]:
    """(label, format, with residual, backend) to time; threshold formats with and without feedback."""
    out = []
    for f in fmts:
        for be in backends:
            if f.uses_residual and residual:
                out.append((f"{f.name} +residual", f, True, be))
            out.append((f.name, f, False, be))
    return out


def measure(entries: List[tuple], x: np.ndarray, variant: str, threads: int, repeats: int,
            stat: str = "median") -> List[dict]:
    """One row per entry: ms of each op and of the copy, and the ratios to the copy."""
    y = np.empty_like(x)
    ops: Dict[str, Callable[[], object]] = {"copy": lambda: np.copyto(y, x)}
    for label, f, residual, (code, be, _) in entries:
        ops.update({f"{code}/{label}/{k}": fn for k, fn in format_ops(be, f, x, residual).items()})
    with kernels(variant, threads, list({id(e[3][2]): e[3][2] for e in entries}.values())):
        t = round_times(ops, repeats, stat)
    rows = []
    for label, f, residual, (code, _, _) in entries:
        enc, dec, acc = (t[f"{code}/{label}/{k}"] for k in ("encode", "decode", "decode_acc"))
        sum2 = t.get(f"{code}/{label}/sum2")
        rows.append(dict(format=label, code=code, residual=residual, variant=variant, threads=threads,
                         encode_ms=enc * 1e3, decode_ms=dec * 1e3, decode_acc_ms=acc * 1e3,
                         sum2_ms=None if sum2 is None else sum2 * 1e3, copy_ms=t["copy"] * 1e3,
                         ratio=(enc + dec) / t["copy"], ratio_acc=(enc + acc) / t["copy"],
                         ratio_sum2=None if sum2 is None else sum2 / t["copy"]))
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


def report(args: argparse.Namespace, rows: List[dict], load_before: float, n: int) -> None:
    import numba

    from horovod_q8.bench.common import machine, markdown, numba_target

    from horovod_q8.backends import native

    stat = "best" if args.stat == "min" else "median"
    family = native.describe() if native.in_use() else f"Numba ({native.describe()}; {numba_target()})"
    print(f"# codec benchmark: {n} float32 ({4 * n / 1e6:.0f} MB, Gaussian), {stat} of {args.repeats} "
          f"interleaved rounds; kernels: {family}; {machine()}; numba {numba.__version__}, "
          f"{numba.config.NUMBA_NUM_THREADS} Numba threads at most; load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    print("# threshold formats: '+residual' rows with error feedback (x and the residual read, the "
          "residual written: one more stream than a copy), the others without")
    print("# ratio = (encode + decode) / copy; ratio_acc = (encode + decode_acc) / copy; sum2 = decode_sum of 2 "
          "ranks' buffers, ratio_sum2 = sum2 / copy; copy = np.copyto into a preallocated float32 buffer (one thread)\n")
    header = ["format", "code", "kernels", "threads", "encode ms", "decode ms", "decode+acc ms", "sum2 ms", "copy ms",
              "ratio", "ratio_acc", "ratio_sum2"]
    print(markdown(header, [[r["format"], r["code"], r["variant"], r["threads"], r["encode_ms"], r["decode_ms"],
                             r["decode_acc_ms"], "-" if r["sum2_ms"] is None else r["sum2_ms"], r["copy_ms"],
                             r["ratio"], r["ratio_acc"], "-" if r["ratio_sum2"] is None else r["ratio_sum2"]]
                            for r in rows]))


def run(args: argparse.Namespace) -> None:
    import numba

    from horovod_q8.backends import cpu, cpu_kernels
    from horovod_q8.bench.common import machine

    load_before = os.getloadavg()[0]
    x = np.random.default_rng(0).standard_normal(args.elements).astype(np.float32)
    fmts = resolve_formats(args.formats, x.size)
    backends: List[Backend] = [(HERE, cpu, cpu_kernels)]
    if args.baseline:
        backends.insert(0, baseline_backend(args.baseline))
    entries = cases(fmts, not args.no_residual, backends)
    rows: List[dict] = []
    for variant, threads in settings(args):
        rows += measure(entries, x, variant, threads, args.repeats, args.stat)
    report(args, rows, load_before, x.size)
    if args.check_reciprocal:
        print("\n# x * (1/scale) instead of the spec's x / scale (blocks of 1024, nearest):")
        for f in fmts:
            if f.kind == "codebook":
                quotients, codes = reciprocal_differences(x, f)
                print(f"# {f.name}: {quotients} of {x.size} quotients and {codes} codes differ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(command=" ".join(sys.argv), machine=machine(), numba=numba.__version__,
                           elements=x.size, repeats=args.repeats, stat=args.stat, baseline=args.baseline,
                           rows=rows), f, indent=1)


def main(argv=None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
