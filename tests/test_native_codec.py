"""The native codec (kernels/codec_x86.c for AVX-512, codec_avx2.c for AVX2): every float32 in
[-1, 1] against the Numba kernel's table search (8-bit), and the bytes and values of the
reference at the edges through the cpu backend, whichever kernels it uses here."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8 import backends
from horovod_q8.backends import cpu, native
from horovod_q8.backends.cpu_kernels import PARALLEL_MIN, SERIAL
from horovod_q8.formats import codebooks, get
from horovod_q8.formats.spec import halving_levels

from conftest import edge_tensor

avx512 = pytest.mark.skipif(native.library() is None, reason="no AVX-512 CPU or no C compiler here")
avx2 = pytest.mark.skipif(native.library_avx2() is None, reason="AVX-512 kernels in use, or no AVX2 / no C compiler")
any_native = pytest.mark.skipif(not native.in_use(), reason="no native kernels here (x86-64 and a C compiler)")
SIGNED8 = ["dynamic_tree", "linear", "mantissa", "static_tree"]
CHUNK = 1 << 24


def numba_codes(x: np.ndarray, name: str, bits: int = 8) -> np.ndarray:
    """Codes of x (one block) from the Numba kernel, whatever the CPU backend would choose."""
    t = codebooks.tables(name, bits)
    out = np.empty(4 + -(-x.size * bits // 8), np.uint8)
    SERIAL["encode_codebook"](x, x.size, x.size, out[:4].view(np.uint32), out[4:], t.carry, t.mids, t.values,
                              t.positive_mid_bits, t.size, bits, t.zero_code, False, 0)
    return out[4:]


def every_unit_float(name: str, encode, T, width: int = 8) -> None:
    """Both signs of every float32 of magnitude <= 1, in blocks whose scale is 1 (x / 1 is x),
    encoded by `encode` (native.encode8's or encode4's signature) against the Numba search."""
    assert T is not None, f"{name} should fit the native kernel"
    top = int(np.float32(1).view(np.uint32))
    for sign in (0, 0x80000000):
        for lo in range(0, top + 1, CHUNK):
            bits = np.arange(lo, min(lo + CHUNK, top + 1), dtype=np.uint32) | np.uint32(sign)
            x = np.concatenate([np.ones(1, np.float32), bits.view(np.float32)])
            got = np.empty(4 + -(-x.size * width // 8), np.uint8)
            encode(x, x.size, x.size, got[:4].view(np.uint32), got[4:], T, 1)
            want = numba_codes(x, name, width)
            bad = np.flatnonzero(got[4:] != want)
            assert bad.size == 0, f"{name}: {bad.size} code bytes differ, first at {x[bad[0] * 8 // width]!r}"


@avx512
@pytest.mark.parametrize("name", SIGNED8)
def test_every_float_in_the_unit_interval(name):
    every_unit_float(name, native.encode8, native.symmetric_tables(name))


@avx512
def test_every_float_in_the_unit_interval_4bit():
    every_unit_float("q4", native.encode4, native.cells4("q4"), width=4)


@avx2
@pytest.mark.parametrize("name", SIGNED8)
def test_every_float_in_the_unit_interval_avx2(name):
    every_unit_float(name, native.encode8, native.avx2_tables(name))


@avx2
def test_every_float_in_the_unit_interval_4bit_avx2():
    every_unit_float("q4", native.encode4, native.avx2_q4("q4"), width=4)


def near_mids(name: str, bits: int, scale: np.float32, rng: np.random.Generator) -> np.ndarray:
    """One block whose absmax is `scale`: every mid of the table times the scale and the floats
    within 3 ulps of it, both signs, then random normals (scaled) and subnormals."""
    mids = codebooks.tables(name, bits).mids
    mids = np.abs(mids[np.isfinite(mids)]).astype(np.float32)
    at = (mids.astype(np.float64) * float(scale)).astype(np.float32)
    near = (at.view(np.int32)[:, None] + np.arange(-3, 4, dtype=np.int32)).ravel().view(np.float32)
    near = near[np.isfinite(near) & (np.abs(near) <= scale)]
    noise = (rng.standard_normal(4096) * 0.3).clip(-1, 1).astype(np.float32) * scale
    tiny = rng.integers(1, 1 << 23, 64, dtype=np.int32).view(np.float32)
    return np.concatenate([[scale], near, -near, noise, tiny, -tiny]).astype(np.float32)


@avx2
@pytest.mark.parametrize("name", SIGNED8)
def test_avx2_codes_at_any_scale_match_the_search(name):
    """Blocks of every scale, from subnormal-adjacent to 2**127, give the Numba search's codes at
    every mid of the table times the scale and within 3 ulps of it (the unit-interval test only
    divides by 1)."""
    rng = np.random.default_rng(5)
    T = native.avx2_tables(name)
    scales = [2.0 ** e for e in (-126, -80, -61, -60, -59, -30, 0, 1, 99, 100, 101, 127)]
    scales += list(np.exp2(rng.uniform(-70, 110, 200)))
    for s in scales:
        s = np.float32(s)
        for scale in (s, np.nextafter(s, np.float32(np.inf)), np.nextafter(s, np.float32(0))):
            x = near_mids(name, 8, np.float32(scale), rng)
            got = np.empty(4 + x.size, np.uint8)
            native.encode8(x, x.size, x.size, got[:4].view(np.uint32), got[4:], T, 1)
            want = numba_codes(x, name)
            bad = np.flatnonzero(got[4:] != want)
            assert bad.size == 0, f"{name}, scale {scale!r}: {bad.size} codes differ, first at {x[bad[0]]!r}"


def test_avx2_q4_takes_at_most_two_mids_per_binade(monkeypatch):
    """The AVX2 4-bit encoder looks up two mids by binade: a table with three in one is Numba's."""
    t = codebooks.tables("q4", 4)
    assert native.avx2_q4("q4") is not None
    crowded = np.sort(np.float32([0.3, 0.31, 0.32, 0.5, 0.6, 0.7, 0.8])).view(np.int32)
    monkeypatch.setattr(native, "tables", lambda name, bits: replace(t, positive_mid_bits=crowded))
    assert native.avx2_q4.__wrapped__("q4") is None


def test_avx2_8bit_takes_at_most_one_mid_per_cell(monkeypatch):
    """The AVX2 8-bit encoder looks up one mid by cell (64 per binade) and covers 2048 cells: a
    table with two mids in one cell, or a first mid below 2**-31, is Numba's."""
    t = codebooks.tables("dynamic_tree", 8)
    assert native.avx2_tables("dynamic_tree") is not None
    top = t.size - 2  # the largest positive mid
    for where, value in ((top - 1, np.nextafter(t.mids[top], np.float32(0))), (t.zero_code, np.float32(2.0 ** -33))):
        mids = t.mids.copy()
        mids[where] = value  # the next to largest mid a float below the largest / a tiny first mid
        monkeypatch.setattr(native, "tables", lambda name, bits, m=mids: replace(t, mids=m))
        assert native.avx2_tables.__wrapped__("dynamic_tree") is None


@avx512
def test_what_the_native_kernels_take():
    assert all(native.symmetric_tables(n + codebooks.UNSIGNED_SUFFIX) is None for n in SIGNED8)
    n = 4096
    assert cpu.native_encoder(get("q8"), n) is not None and cpu.native_encoder(get("q4"), n) is not None
    assert cpu.native_encoder(get("q8", rounding="stochastic"), n) is None
    assert cpu.native_encoder(get("q4_threshold").for_shape((n,)), n) is None
    assert cpu.native_decoder(get("q4_threshold").for_shape((n,)), n) is not None
    assert cpu.native_decoder(get("twobit").for_shape((n,)), n) is not None


FORMATS = [("q8", name) for name in SIGNED8] + [("q4", "q4"), ("q8", "linear_unsigned"), ("q4", "q4_unsigned")]


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1023, 1025, 4097, 300_001])
@pytest.mark.parametrize("block", [1024, 100, 16, 0])
@pytest.mark.parametrize("base,name", FORMATS)
def test_bytes_and_values_match_the_reference(n, block, base, name):
    """Native where it applies (and decoding the unsigned tables), Numba for the rest: same bytes."""
    rng = np.random.default_rng(n * 7 + block)
    x = edge_tensor(n, rng)
    if name.endswith(codebooks.UNSIGNED_SUFFIX):
        x = np.abs(x)
    fmt = replace(get(base, block_size=block), codebook=name)
    ref = q.quantize(x, fmt, backend="reference")
    got = q.quantize(x, fmt, backend="cpu")
    assert np.array_equal(ref, got)
    want = q.dequantize(ref, fmt, n, backend="reference")
    assert np.array_equal(want.view(np.uint32), q.dequantize(got, fmt, n, backend="cpu").view(np.uint32))
    acc = np.full(n, 0.25, np.float32)
    q.dequantize(got, fmt, n, out=acc, accumulate=True, backend="cpu")
    assert np.array_equal((np.float32(0.25) + want).view(np.uint32), acc.view(np.uint32))


@avx2
def test_what_the_avx2_kernels_take():
    assert all(native.avx2_tables(n) is not None for n in SIGNED8)
    assert all(native.avx2_tables(n + codebooks.UNSIGNED_SUFFIX) is None for n in SIGNED8)
    n = 4096
    assert isinstance(cpu.native_encoder(get("q8"), n), native.Avx2Tables)
    assert isinstance(cpu.native_encoder(get("q4"), n), native.Avx2Q4)
    assert cpu.native_encoder(get("q8", rounding="stochastic"), n) is None
    assert cpu.native_encoder(get("q4", rounding="stochastic"), n) is None
    assert cpu.native_encoder(replace(get("q4"), codebook="q4_unsigned"), n) is None  # not symmetric
    assert cpu.native_encoder(get("q4", block_size=5), n) is None  # blocks not starting on a byte
    assert cpu.avx2_decodes(get("q4_threshold").for_shape((n,)), n) and cpu.avx2_decodes(get("q8"), n)
    assert cpu.avx2_decodes(get("twobit").for_shape((n,)), n)


@avx2
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name", ["q8", "q4"])
def test_avx2_threads_split_on_block_edges(threads, name):
    n = PARALLEL_MIN * 2 + 777
    x = edge_tensor(n, np.random.default_rng(threads))
    fmt = get(name)
    nb, block = fmt.n_blocks(n), fmt.block_for(n)
    want = q.quantize(x, fmt, backend="reference")
    got = np.empty(fmt.nbytes(n), np.uint8)
    encode, T = (native.encode8, native.avx2_tables("dynamic_tree")) if fmt.bits == 8 else \
        (native.encode4, native.avx2_q4("q4"))
    encode(x, n, block, got[: 4 * nb].view(np.uint32), got[4 * nb:], T, threads)
    assert np.array_equal(got, want)
    out = np.empty(n, np.float32)
    native.sum_ranks([want[4 * nb:]], n, block, fmt.bits, [want[: 4 * nb].view(np.float32)],
                     native.decode_values(fmt), out, threads)
    assert np.array_equal(out.view(np.uint32), q.dequantize(want, fmt, n, backend="reference").view(np.uint32))


@avx512
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name", ["q8", "q4"])
def test_threads_split_on_block_edges(threads, name):
    n = PARALLEL_MIN * 2 + 777
    x = edge_tensor(n, np.random.default_rng(threads))
    fmt = get(name)
    nb, block = fmt.n_blocks(n), fmt.block_for(n)
    got = np.empty(fmt.nbytes(n), np.uint8)
    scale_bits, codes = got[: 4 * nb].view(np.uint32), got[4 * nb:]
    if fmt.bits == 8:
        T = native.symmetric_tables(fmt.codebook)
        native.encode8(x, n, block, scale_bits, codes, T, threads)
    else:
        native.encode4(x, n, block, scale_bits, codes, native.cells4(fmt.codebook), threads)
        T = fmt.decode_table()
    assert np.array_equal(got, q.quantize(x, fmt, backend="reference"))
    out = np.empty(n, np.float32)
    native.decode(codes, n, block, fmt.bits, got[: 4 * nb].view(np.float32), T, out, False, threads)
    want = q.dequantize(got, fmt, n, backend="reference")
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
    twice = np.empty(n, np.float32)
    native.sum_ranks([codes, codes], n, block, fmt.bits, [got[: 4 * nb].view(np.float32)] * 2, T, twice, threads,
                     post=0.5, isa="avx512")
    assert np.array_equal(twice.view(np.uint32), ((want + want) * np.float32(0.5)).view(np.uint32))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 1024, 4099])
@pytest.mark.parametrize("name", ["q4_threshold", "twobit"])
def test_threshold_codes_decode_natively(n, name):
    """4- and 2-bit threshold codes (no scales; a NaN code for a non-finite input) decode as the
    reference's, also added into a buffer."""
    fmt = get(name).for_shape((n,))
    x = edge_tensor(n, np.random.default_rng(n)) * np.float32(1e-3)
    buf = q.quantize(x, fmt, residual=np.zeros(n, np.float32), backend="reference")
    want = q.dequantize(buf, fmt, n, backend="reference")
    assert np.array_equal(want.view(np.uint32), q.dequantize(buf, fmt, n, backend="cpu").view(np.uint32))
    acc = np.full(n, 0.25, np.float32)
    q.dequantize(buf, fmt, n, out=acc, accumulate=True, backend="cpu")
    assert np.array_equal((np.float32(0.25) + want).view(np.uint32), acc.view(np.uint32))


def test_an_unknown_native_setting_is_a_clear_error():
    code = "from horovod_q8.backends import native; native.library()"
    out = subprocess.run([sys.executable, "-c", code], env={"HOROVOD_Q8_NATIVE": "avx3", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True)
    assert out.returncode != 0 and "HOROVOD_Q8_NATIVE='avx3': use 1" in out.stderr, out.stderr[-500:]


def test_switched_off_by_environment():
    code = "from horovod_q8.backends import native; print(not native.in_use())"
    out = subprocess.run([sys.executable, "-c", code], env={"HOROVOD_Q8_NATIVE": "0", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@any_native
@pytest.mark.parametrize("n", [1, 2, 3, 15, 17, 18, 19, 31, 32, 33, 63, 65, 4099, 300_001])
@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("name", ["q4_threshold", "twobit"])
def test_threshold_codes_and_residual_match_the_reference(n, with_residual, name):
    """g = x + residual at and around every level, both signs, +-0, NaN and +-Inf."""
    _check_threshold(get(name).for_shape((n,)), n, with_residual)


@any_native
@pytest.mark.parametrize("levels", [
    (0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.08),  # two in a binade
    (0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22),  # more than two: the kernels count level by level
    (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0),  # over more than 8 binades: the same
    tuple(float(v) for v in halving_levels(1e-38)),  # subnormal levels share one binade
    (0.5,), (0.25, 3.0)])
@pytest.mark.parametrize("with_residual", [True, False])
def test_threshold_codes_for_any_levels_match_the_reference(levels, with_residual):
    """The AVX2 and AVX-512 kernels count levels by binade where they allow it, else level by level."""
    _check_threshold(replace(get("q4_threshold").for_shape((4099,)), levels=levels), 4099, with_residual)


def test_level_binades_tables():
    """below | l1 | l2 | e0 of halving levels; None where three share a binade, where they span
    more binades than the vector has lanes, and for no finite level."""
    def bits(levels):
        return np.asarray(list(levels) + [np.inf] * (7 - len(levels)), np.float32)

    halving = bits(halving_levels(0.5))
    t = native.level_binades(halving.tobytes(), 8)
    lb = halving.view(np.int32)
    assert t[:8].tolist() == list(range(8)) and t[8:15].tolist() == (lb[:7] - 1).tolist()
    assert t[15] == np.iinfo(np.int32).max and (t[16:24] == np.iinfo(np.int32).max).all()
    assert t[24] == lb[0] >> 23 and native.level_binades(halving.tobytes(), 16).size == 49
    two = bits((0.01, 0.015, 0.02, 0.03))  # 0.015 shares 0.01's binade, 0.03 0.02's
    t = native.level_binades(two.tobytes(), 8)
    assert t[:3].tolist() == [0, 2, 4] and t[16] == two.view(np.int32)[1] - 1
    assert native.level_binades(bits((0.1, 0.11, 0.12)).tobytes(), 8) is None  # three in [1/16, 1/8)
    wide = bits((1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0))  # 20 binades
    assert native.level_binades(wide.tobytes(), 8) is None and native.level_binades(wide.tobytes(), 16) is None
    assert native.level_binades(bits(()).tobytes(), 8) is None


def _check_threshold(fmt, n: int, with_residual: bool) -> None:
    lv = np.asarray(fmt.levels, np.float32)
    special = np.concatenate([lv, np.nextafter(lv, np.float32(0)), np.nextafter(lv, np.float32(np.inf)),
                              [0.0, -0.0, np.nan, np.inf, -np.inf]]).astype(np.float32)
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * lv[-1]).astype(np.float32)
    k = min(n, special.size)
    x[:k] = special[:k] * np.where(np.arange(k) % 2, -1, 1).astype(np.float32)
    r0 = (rng.standard_normal(n) * lv[0]).astype(np.float32) if with_residual else None
    r_ref = None if r0 is None else r0.copy()
    r_cpu = None if r0 is None else r0.copy()
    ref = q.quantize(x, fmt, residual=r_ref, backend="reference")
    assert np.array_equal(ref, q.quantize(x, fmt, residual=r_cpu, backend="cpu"))
    if with_residual:
        assert np.array_equal(r_ref.view(np.uint32), r_cpu.view(np.uint32))


@any_native
@pytest.mark.parametrize("name", ["q4_threshold", "twobit"])
def test_threshold_threads_split_on_bytes(name):
    n = PARALLEL_MIN * 2 + 777
    fmt = get(name).for_shape((n,))
    x = edge_tensor(n, np.random.default_rng(5)) * np.float32(1e-3)
    r_ref, r_nat = np.zeros(n, np.float32), np.zeros(n, np.float32)
    want = q.quantize(x, fmt, residual=r_ref, backend="reference")
    got = np.zeros_like(want)
    native.threshold(x, n, r_nat, got[4 * fmt.n_blocks(n):], cpu.padded_levels(tuple(fmt.levels)), fmt.bits, 3)
    assert np.array_equal(want, got) and np.array_equal(r_ref.view(np.uint32), r_nat.view(np.uint32))


@pytest.mark.parametrize("name", ["q8", "q4", "twobit"])
@pytest.mark.parametrize("scale", [0.5, 1 / 3])
def test_decode_times_a_factor_in_the_same_pass(name, scale):
    """(value * block scale) * factor, rounded twice, as a second pass over the result would."""
    n = 5003
    fmt = get(name).for_shape((n,))
    x = edge_tensor(n, np.random.default_rng(3))
    buf = q.quantize(x, fmt, residual=np.zeros(n, np.float32) if fmt.uses_residual else None, backend="reference")
    want = q.dequantize(buf, fmt, n, backend="reference") * np.float32(scale)
    for be in ("reference", "cpu"):
        got = np.empty(n, np.float32)
        backends.get(be).decode(buf, fmt, n, out=got, scale=scale)
        assert np.array_equal(want.view(np.uint32), got.view(np.uint32)), be
        with pytest.raises(ValueError, match="accumulation"):
            backends.get(be).decode(buf, fmt, n, out=got, accumulate=True, scale=scale)


@pytest.mark.parametrize("n", [1, 15, 17, 1025, 4099, PARALLEL_MIN * 2 + 777])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("name,block", [("q8", None), ("q8_linear", 100), ("q4", None), ("q4", 99),
                                        ("q4_threshold", None), ("twobit", None)])
@pytest.mark.parametrize("kernels", ["cpu", "numba"])
def test_sum_of_ranks_in_one_pass(n, k, name, block, kernels, request):
    """decode_sum: the bits of a decode, k - 1 accumulating decodes and a scaling pass, for
    every kind of decode (native 8-, 4- and 2-bit, with and without scales, and Numba's: two
    parts per pass, each further one added with the factor in the last pass; blocks of 99
    4-bit codes straddle bytes)."""
    cpu_backend = request.getfixturevalue("numba_only") if kernels == "numba" else cpu
    fmt = (get(name, block_size=block) if block else get(name)).for_shape((n,))
    rng = np.random.default_rng(n + 31 * k)
    bufs = [q.quantize(edge_tensor(n, rng) * np.float32(r + 1), fmt, backend="reference",
                       residual=np.zeros(n, np.float32) if fmt.uses_residual else None) for r in range(k)]
    for scale in (1.0, 0.5, 1 / 3):
        want = backends.decode_sum_by_parts(backends.get("reference").decode, bufs, fmt, n,
                                            np.empty(n, np.float32), scale)
        for be in (backends.get("reference"), cpu_backend):
            got = be.decode_sum(bufs, fmt, n, np.full(n, np.nan, np.float32), scale)
            assert np.array_equal(want.view(np.uint32), got.view(np.uint32)), (be.__name__, scale)


def test_sum_of_no_ranks_is_zero():
    fmt = get("q8")
    for be in ("reference", "cpu"):
        assert not backends.get(be).decode_sum([], fmt, 5, np.ones(5, np.float32), 0.5).any()


LARGE = (32 << 20) // 4 + 1024 * 3 + 517  # elements of a decoded output that streams


def large_decodes(name: str, seed: int, decode) -> tuple:
    """decode(codes, scales or None, out, factor, threads) of a tensor of a little over 32 MB
    (a last block cut short) against the reference's values at outputs of every alignment, with
    and without a factor, in 1 and 2 threads; returns (codes, scales, reference values)."""
    n = LARGE
    fmt = get(name).for_shape((n,))
    x = edge_tensor(n, np.random.default_rng(seed)) * np.float32(1e-3 if fmt.uses_residual else 1)
    buf = q.quantize(x, fmt, backend="cpu")
    want = q.dequantize(buf, fmt, n, backend="reference")
    nb = fmt.n_blocks(n)
    codes, scales = buf[4 * nb:], buf[: 4 * nb].view(np.float32) if fmt.has_scales else None
    raw = np.empty(n + 64, np.float32)
    base = (-raw.ctypes.data % 64) // 4
    for offset, scale, threads in [(0, 1.0, 1), (1, 1.0, 1), (2, 1 / 3, 2), (3, 0.5, 1), (4, 1.0, 1), (7, 1.0, 2),
                                   (8, 1.0, 1), (13, 1.0, 2), (14, 0.5, 1)]:
        out = raw[base + offset: base + offset + n]
        out[:] = np.nan
        decode(codes, scales, out, float(np.float32(scale)), threads)
        expect = want if scale == 1.0 else want * np.float32(scale)
        assert np.array_equal(expect.view(np.uint32), out.view(np.uint32)), (offset, scale, threads)
    return codes, scales, want


@avx512
@pytest.mark.parametrize("name", ["q8", "q4", "q4_threshold", "twobit"])
def test_large_decodes_stream_at_any_alignment(name):
    """Decodes of at least 32 MB use streaming stores (kernels/codec_x86.c, STREAM_MIN_BYTES),
    from each block's first 64-byte boundary, also where threads write parts of them."""
    fmt = get(name).for_shape((LARGE,))
    large_decodes(name, 11, lambda c, s, out, f, t: native.decode(
        c, LARGE, fmt.block_for(LARGE), fmt.bits, s, cpu.native_decoder(fmt, LARGE), out, False, t, f))


@avx2
@pytest.mark.parametrize("name", ["q8", "q4", "q4_threshold", "twobit"])
def test_large_avx2_decodes_stream_at_any_alignment(name):
    """The AVX2 decode of at least 32 MB streams its stores from each block's first 32-byte
    boundary where the output is aligned to a byte's codes (else stores as the others);
    accumulating does not stream."""
    fmt = get(name).for_shape((LARGE,))

    def decode(c, s, out, factor, threads, accumulate=False):
        native.sum_ranks([c], LARGE, fmt.block_for(LARGE), fmt.bits, None if s is None else [s],
                         native.decode_values(fmt), out, threads, accumulate, factor)

    codes, scales, want = large_decodes(name, 12, decode)
    out = np.full(want.size, 0.25, np.float32)
    decode(codes, scales, out, 1.0, 2, accumulate=True)
    assert np.array_equal((np.float32(0.25) + want).view(np.uint32), out.view(np.uint32))


@pytest.mark.skipif(native.library() is None or native._load("avx2")[0] is None,
                    reason="needs AVX-512 (elsewhere the AVX2 kernels are in use and tested directly)")
def test_the_avx2_kernels_where_avx512_runs_too():
    """The AVX2 kernels, which CPUs without AVX-512 use, pass this file's tests under
    HOROVOD_Q8_NATIVE=avx2 on this one (where they would otherwise skip), and
    scripts/avx2_encode.py gives the AVX-512 kernel's codes."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", __file__, "-k",
                          "not where_avx512_runs_too"], env={**os.environ, "HOROVOD_Q8_NATIVE": "avx2"},
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "AVX-512 kernels in use" not in out.stdout, out.stdout[-3000:]  # the AVX2 tests ran
    script = Path(__file__).resolve().parents[1] / "scripts" / "avx2_encode.py"
    bench = subprocess.run([sys.executable, str(script), "--elements", "5000", "--rounds", "1"],
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr
    rows = [line for line in bench.stdout.splitlines() if line.startswith("| ") and "kernels" not in line]
    assert len(rows) >= 6 and all(line.rstrip(" |").endswith("True") for line in rows), bench.stdout
