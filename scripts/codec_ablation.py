"""Where the AVX-512 q8 encode's time goes: each row removes or replaces one step of the
encode in kernels/codec_x86.c (a text substitution of the committed source), builds it as
the product builds it, and times hq8_encode8, by default on a tensor that stays in L2, so that
the kernel's arithmetic, not memory, is what is measured (--elements 25600000: from memory).
Most rows give wrong codes: they are for timing only, and the `same codes` column says which.

    python scripts/codec_ablation.py [--elements 131072] [--rounds 2000]

Rounds are interleaved over the variants and the minimum is kept; read differences below
about 5% as noise on a shared machine.
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from horovod_q8.backends import native  # noqa: E402
from horovod_q8.collective.transport import AlignedPool  # noqa: E402

SOURCE = REPO / "kernels" / "codec_x86.c"

# quot16's first line, where every codebook encode takes its quotient
QUOT = "    __m512i b = "

# (label, [(text in codec_x86.c, its replacement)])
VARIANTS: List[Tuple[str, List[Tuple[str, str]]]] = [
    ("this tree's kernel", []),
    ("x * (1/s) instead of x / s (not the spec's bytes)", [
        (QUOT + "_mm512_castps_si512(_mm512_div_ps(xv, vs));",
         QUOT + "_mm512_castps_si512(_mm512_mul_ps(xv, _mm512_div_ps(_mm512_set1_ps(1.0f), vs)));")]),
    ("x / s without a division (Markstein: q = x * (1/s), an fma residual, an fma correction; exact for these scales)", [
        (QUOT + "_mm512_castps_si512(_mm512_div_ps(xv, vs));",
         QUOT + "_mm512_castps_si512(markstein(xv, vs));"),
        ("// The first step of every codebook encode",
         "AVX512 static inline __m512 markstein(__m512 x, __m512 s) {\n"
         "    const __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), s);  // hoisted: s is the block's\n"
         "    __m512 q = _mm512_mul_ps(x, r);\n"
         "    return _mm512_fmadd_ps(_mm512_fnmadd_ps(q, s, x), r, q);\n}\n"
         "// The first step of every codebook encode"),
        ('#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))',
         '#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))')]),
    ("quotients not taken ahead (each vector's division at the head of its own steps)", [
        ("if (bits == 8) _mm_storeu_si128((__m128i *)(codes + i), codes16q(a0, n0, S, clamp_low));",
         "if (bits == 8) _mm_storeu_si128((__m128i *)(codes + i), codes16(_mm512_loadu_ps(x + i), vs, S, clamp_low));")]),
    ("no prefetch (shows from memory: --elements 25600000)", [
        ("        _mm_prefetch((const char *)(nx + i + PREFETCH_AHEAD), _MM_HINT_T0);\n", "")]),
    ("no segment refinement (one lookup, one compare, one add; not the spec's bytes)", [
        ("    d = _mm512_mask_add_epi32(d, _mm512_cmpgt_epi32_mask(a, _mm512_permutex2var_epi32(S->next_at[0], e, S->next_at[1])),\n"
         "                              d, one);\n", "")]),
    ("no clamps (w_lo, w_hi)", [
        ("    if (clamp_low) w = _mm512_max_ps(w, _mm512_permutexvar_ps(d, S->w_lo));\n"
         "    w = _mm512_min_ps(w, _mm512_permutexvar_ps(d, S->w_hi));\n", "")]),
    ("no tie check", [("    if (tie) {", "    if (0) {")]),
    ("no narrowing to bytes (vpmovdb)", [
        ("return _mm512_cvtepi32_epi8(_mm512_mask_sub_epi32(code, neg, S->twice_center, code));",
         "return _mm512_castsi512_si128(_mm512_mask_sub_epi32(code, neg, S->twice_center, code));")]),
]


def variant_source(edits: List[Tuple[str, str]]) -> str:
    """The committed source with `edits` applied; each must match exactly once."""
    s = SOURCE.read_text()
    for old, new in edits:
        if s.count(old) != 1:
            raise SystemExit(f"codec_ablation: {old[:60]!r}... is not in {SOURCE} exactly once; update VARIANTS")
        s = s.replace(old, new)
    return s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--elements", type=int, default=1 << 17, help="float32 elements (default: 512 KB, in L2)")
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=2000)
    args = p.parse_args()
    if not native.library():
        raise SystemExit("codec_ablation: the AVX-512 kernels do not run on this CPU")
    n, block = args.elements, args.block
    aligned = AlignedPool(per_size=0)  # fresh 64-byte-aligned arrays: no vector load or store splits a line
    x = aligned(n, np.float32)
    x[:] = np.random.default_rng(0).standard_normal(n)
    T = native.symmetric_tables("dynamic_tree")
    nb = -(-n // block)
    libs = [native.load_variant(f"codec_x86_ablation{k}.c", variant_source(edits), "avx512")
            for k, (_, edits) in enumerate(VARIANTS)]
    outs = [(np.empty(nb, np.uint32), aligned(n, np.uint8)) for _ in libs]
    best: Dict[int, float] = {k: float("inf") for k in range(len(libs))}
    for _ in range(args.rounds):
        for k, lib in enumerate(libs):
            sb, c = outs[k]
            t = time.perf_counter()
            lib.hq8_encode8(x.ctypes.data, n, block, sb.ctypes.data, c.ctypes.data, ctypes.byref(T))
            best[k] = min(best[k], time.perf_counter() - t)
    from horovod_q8.bench.common import machine
    print(f"# q8 (dynamic tree) encode, {n} float32, blocks of {block}, min of {args.rounds} rounds; "
          f"{machine()}\n")
    print("| variant | us | ns/element | vs this tree | same codes |")
    print("|---|---|---|---|---|")
    for k, (label, _) in enumerate(VARIANTS):
        same = all(np.array_equal(a, b) for a, b in zip(outs[k], outs[0]))
        print(f"| {label} | {best[k] * 1e6:.1f} | {best[k] / n * 1e9:.3f} | {best[k] / best[0]:.2f} | {same} |")


if __name__ == "__main__":
    main()
