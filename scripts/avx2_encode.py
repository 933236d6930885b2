"""The AVX2 q8 and q4 encodes (kernels/codec_avx2.c, for CPUs without AVX-512) of this tree
beside a commit's (where it has them), on one core, in L2 and from memory; and whether both give
the AVX-512 kernel's codes (where AVX-512 runs, the AVX2 kernels are otherwise not used, so
`bench codec` shows them only under HOROVOD_Q8_NATIVE=avx2).

    python scripts/avx2_encode.py [--baseline REV] [--rounds 9] [--elements 25600000]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from horovod_q8.backends import native  # noqa: E402
from horovod_q8.bench.codec import baseline_backend  # noqa: E402
from horovod_q8.bench.common import machine  # noqa: E402
from horovod_q8.collective.transport import AlignedPool  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default="HEAD", help="commit whose codec_avx2.c (with its tables) to time beside this tree's")
    p.add_argument("--rounds", type=int, default=9, help="rounds from memory (in L2: 100x as many)")
    p.add_argument("--elements", type=int, default=25_600_000, help="float32 elements of the from-memory row")
    args = p.parse_args()
    old = baseline_backend(args.baseline)[1].native  # the revision's native.py (its tables) and kernels/
    sides = {"this tree": native, args.baseline: old}  # each kernel with the tables its own native.py builds
    libs = {k: m.load_variant(f"codec_avx2_{i}.c", m.kernel_source("codec_avx2.c"), "avx2")
            for i, (k, m) in enumerate(sides.items())}
    reference = native.library()
    # format: (AVX2 kernel, its table builder and codebook, AVX-512 kernel, its table, bits per code)
    kinds = {"q8": ("hq8_avx2_encode8", "avx2_tables", "dynamic_tree", "hq8_encode8",
                    native.symmetric_tables("dynamic_tree"), 8),
             "q4": ("hq8_avx2_encode4", "avx2_q4", "q4", "hq8_encode4", native.cells4("q4"), 4)}
    aligned, rng = AlignedPool(per_size=0), np.random.default_rng(0)
    print(f"# AVX2 encodes (q8: dynamic tree), blocks of 1024, min of the rounds; {machine()}\n")
    print(f"| format | kernels | elements | ms | ns/element | same codes as {args.baseline}'s | same codes as AVX-512 |")
    print("|---|---|---|---|---|---|---|")
    for fmt, (fn, build, book, ref_fn, ref_T, bits) in kinds.items():
        have = {k: getattr(lib, fn) for k, lib in libs.items() if hasattr(lib, fn)}
        tabs = {k: getattr(sides[k], build)(book) for k in have}
        for n, rounds in ((1 << 17, 100 * args.rounds), (args.elements, args.rounds)):
            x = aligned(n, np.float32)
            x[:] = rng.standard_normal(n)
            x[5], x[3000], x[7000:8100] = np.nan, np.inf, 0.0  # a NaN block, an overflowed one, zeros
            nb, nc = -(-n // 1024), -(-n * bits // 8)
            outs = {k: (np.empty(nb, np.uint32), aligned(nc, np.uint8)) for k in have}
            best = {k: float("inf") for k in have}
            for _ in range(rounds):
                for k, kernel in have.items():
                    sb, c = outs[k]
                    t = time.perf_counter()
                    kernel(x.ctypes.data, n, 1024, sb.ctypes.data, c.ctypes.data, ctypes.byref(tabs[k]))
                    best[k] = min(best[k], time.perf_counter() - t)
            want = None
            if reference is not None:
                want = (np.empty(nb, np.uint32), aligned(nc, np.uint8))
                getattr(reference, ref_fn)(x.ctypes.data, n, 1024, want[0].ctypes.data, want[1].ctypes.data,
                                           ctypes.byref(ref_T))
            for k in have:
                same = "no AVX-512 here" if want is None else all(np.array_equal(a, b) for a, b in zip(outs[k], want))
                base = all(np.array_equal(a, b) for a, b in zip(outs[k], outs[args.baseline])) \
                    if args.baseline in outs else "-"
                print(f"| {fmt} | {k} | {n} | {best[k] * 1e3:.3f} | {best[k] / n * 1e9:.3f} | {base} | {same} |")

if __name__ == "__main__":
    main()
