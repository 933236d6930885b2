"""Times hq8_encode8 / hq8_encode4 (and the decodes of their codes) of 25.6M Gaussian float32 from kernel source files given on
the command line (each built as backends/native builds it), interleaved round by round, the best
of R rounds, and checks that every variant writes the bytes of the first.

    python encode_probe.py kernels/codec_x86.c /tmp/variant.c ...
"""
import ctypes
import sys
import time
from pathlib import Path

import numpy as np

from horovod_q8.backends import native
from horovod_q8.formats import spec
from horovod_q8.formats.codebooks import tables

N, BLOCK, ROUNDS = 25_600_000, 1024, 15


def load(path: str) -> ctypes.CDLL:
    source = Path(path).read_text()
    lib = ctypes.CDLL(str(native.build("codec_x86.c", source, native._compiler())))
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.cells = "hq8_cells4" in source  # session 14's 4-bit encoder takes its cells, older ones the mids
    lib.hq8_encode8.argtypes = [p, i64, i64, p, p, p]
    lib.hq8_encode4.argtypes = [p, i64, i64, p, p, p] + ([] if lib.cells else [i32])
    lib.hq8_decode8.argtypes = lib.hq8_decode4.argtypes = [p, i64, i64, p, p, p, i32, ctypes.c_float]
    return lib


def main() -> None:
    x = np.random.default_rng(0).standard_normal(N, dtype=np.float32)
    nb = -(-N // BLOCK)
    T = native.symmetric_tables(spec.get("q8").codebook)
    t4 = tables(spec.get("q4").codebook, 4)
    cells = native.cells4(spec.get("q4").codebook)
    pm4 = np.ascontiguousarray(t4.positive_mid_bits, dtype=np.int32)
    libs = [load(p) for p in sys.argv[1:]]
    raw = np.empty(N + 16, np.float32)
    copy_dst, dec = np.empty_like(x), raw[(-raw.ctypes.data % 64) // 4:][:N]  # 64-byte aligned
    table4 = spec.get("q4").decode_table()
    outs = {(i, k): (np.empty(nb, np.uint32), np.empty(N if k == 8 else N // 2, np.uint8))
            for i in range(len(libs)) for k in (8, 4)}
    best: dict = {}
    for _ in range(ROUNDS):
        t0 = time.perf_counter(); np.copyto(copy_dst, x); best["copy"] = min(best.get("copy", 1e9), time.perf_counter() - t0)
        for i, lib in enumerate(libs):
            for k in (8, 4):
                s, c = outs[(i, k)]
                t0 = time.perf_counter()
                if k == 8:
                    lib.hq8_encode8(x.ctypes.data, N, BLOCK, s.ctypes.data, c.ctypes.data, ctypes.byref(T))
                elif lib.cells:
                    lib.hq8_encode4(x.ctypes.data, N, BLOCK, s.ctypes.data, c.ctypes.data, ctypes.byref(cells))
                else:
                    lib.hq8_encode4(x.ctypes.data, N, BLOCK, s.ctypes.data, c.ctypes.data, pm4.ctypes.data, t4.zero_code)
                best[(i, k)] = min(best.get((i, k), 1e9), time.perf_counter() - t0)
                scales = s.view(np.float32)
                t0 = time.perf_counter()
                if k == 8:
                    lib.hq8_decode8(c.ctypes.data, N, BLOCK, scales.ctypes.data, ctypes.byref(T), dec.ctypes.data, 0, 1.0)
                else:
                    lib.hq8_decode4(c.ctypes.data, N, BLOCK, scales.ctypes.data, table4.ctypes.data, dec.ctypes.data, 0, 1.0)
                best[(i, k, "d")] = min(best.get((i, k, "d"), 1e9), time.perf_counter() - t0)
    print(f"# best of {ROUNDS}, {N} float32, block {BLOCK}; copy {1e3 * best['copy']:.2f} ms")
    for i, p in enumerate(sys.argv[1:]):
        same = all(np.array_equal(outs[(i, k)][0], outs[(0, k)][0]) and np.array_equal(outs[(i, k)][1], outs[(0, k)][1])
                   for k in (8, 4))
        print(f"{p}: q8 encode {1e3 * best[(i, 8)]:.2f} ms, decode {1e3 * best[(i, 8, 'd')]:.2f}; "
              f"q4 encode {1e3 * best[(i, 4)]:.2f} ms, decode {1e3 * best[(i, 4, 'd')]:.2f}; bytes same as the first: {same}")


if __name__ == "__main__":
    main()
