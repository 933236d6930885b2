"""The CPU kernels' table searches against the reference where they are easiest to get wrong:
at every midpoint of every table, one float either side, at ±0 and ±1 (blocks of scale 1)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8.formats import codebooks, get, names
from horovod_q8.formats import reference as R

from conftest import edge_tensor

BASE = {8: get("q8", block_size=1024), 4: get("q4", block_size=1024)}
TABLES = [(name, 4 if name.startswith("q4") else 8) for name in codebooks.VALUE_TABLES]


def edge_values(t: codebooks.CodebookTables) -> np.ndarray:
    """Each midpoint and its neighbouring floats, both signs, and 0, -0, tiny values; |v| <= 1."""
    mids = t.mids[: t.size - 1]
    near = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    v = np.concatenate([near, -near, [0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 1.0, -1.0]]).astype(np.float32)
    return v[np.abs(v) <= 1]


@pytest.mark.parametrize("name,bits", TABLES)
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("kernels", ["cpu", "numba"])
def test_codes_at_every_midpoint_match_the_reference(name, bits, rounding, kernels, request):
    if kernels == "numba":
        request.getfixturevalue("numba_only")
    t = codebooks.tables(name, bits)
    v = edge_values(t)
    blocks = -(-v.size // 1023)
    rows = np.zeros((blocks, 1024), np.float32)
    rows[:, 0] = 1.0  # every block's scale is exactly 1: x / scale is x itself
    rows[:, 1:] = np.resize(v, blocks * 1023).reshape(blocks, 1023)
    x = rows.reshape(-1)
    fmt = replace(BASE[bits], codebook=name, rounding=rounding, seed=7)
    ref = q.quantize(x, fmt, backend="reference")
    assert np.array_equal(ref, q.quantize(x, fmt, backend="cpu"))
    if rounding == "nearest" and not name.endswith(codebooks.UNSIGNED_SUFFIX):
        # and the reference itself counts the midpoints below v
        codes = np.searchsorted(t.mids[: t.size - 1], x, side="left")
        np.testing.assert_array_equal(R.unpack(ref[4 * blocks:], bits, x.size), codes)


def test_carry_table_counts_the_mids_below_every_key_s_floats():
    """(carry[key] + low) >> 16 against count(mids < v) at both ends of every 16-bit key of
    [-1, 1] and either side of every mid's own low bits."""
    for name in ("dynamic_tree", "linear", "mantissa", "static_tree", "linear_unsigned"):
        t = codebooks.tables(name, 8)
        mids = t.mids[: t.size - 1]
        mb = mids.view(np.uint32)
        ends = (np.arange(65536, dtype=np.uint32)[:, None] << 16 | np.array([0, 1, 0xFFFE, 0xFFFF], np.uint32)).ravel()
        bits = np.concatenate([ends, mb, mb + 1, mb - 1]).astype(np.uint32)
        v = bits.view(np.float32)
        bits = bits[np.abs(v) <= 1]
        low = (bits ^ np.where(bits >> 31 == 1, np.uint32(0xFFFF), np.uint32(0))) & np.uint32(0xFFFF)
        got = (t.carry[bits >> 16].astype(np.uint64) + low) >> 16
        np.testing.assert_array_equal(got, np.searchsorted(mids, bits.view(np.float32), side="left"), err_msg=name)


def test_numba_vector_search_over_every_float_in_the_unit_interval():
    """The hand-vectorised 8-bit search (numba_vectors.carry_codes) against the scalar carry
    lookup (_nearest_carry) for both signs of every float32 of magnitude <= 1, in blocks of 1024
    whose first element, 1.0, makes the scale 1; the last block of each run cut short."""
    from horovod_q8.backends import cpu_kernels as K

    t = codebooks.tables("dynamic_tree", 8)
    top, run = int(np.float32(1).view(np.uint32)), 1023 * (1 << 14)
    for sign in (0, 0x80000000):
        for lo in range(0, top + 1, run):
            bits = np.arange(lo, min(lo + run, top + 1), dtype=np.uint32) | np.uint32(sign)
            rows = -(-bits.size // 1023)
            padded = np.zeros(rows * 1023, np.uint32)
            padded[: bits.size] = bits
            x = np.ones((rows, 1024), np.float32)
            x[:, 1:] = padded.view(np.float32).reshape(rows, 1023)
            x = x.reshape(-1)[: bits.size + rows]
            got = np.empty(4 * rows + x.size, np.uint8)
            K.SERIAL["encode_codebook"](x, x.size, 1024, got[: 4 * rows].view(np.uint32), got[4 * rows:], t.carry,
                                        t.mids, t.values, t.positive_mid_bits, t.size, 8, t.zero_code, False, 0)
            want = np.empty(x.size, np.uint8)
            K._nearest_carry(x, x.size, t.carry, np.empty(x.size, np.uint16), np.empty(x.size, np.uint16), want)
            bad = np.flatnonzero(got[4 * rows:] != want)
            assert bad.size == 0, f"{bad.size} codes differ, first at {x[bad[0]]!r}"


def test_numba_vectors_digest_is_current():
    """Numba's cache is keyed by cpu_kernels.py's stamp alone: a change to numba_vectors.py must
    change NUMBA_VECTORS_DIGEST there, or cached kernels would keep the old vector code."""
    import hashlib

    from horovod_q8.backends import cpu_kernels as K, numba_vectors

    digest = hashlib.sha256(Path(numba_vectors.__file__).read_bytes()).hexdigest()[:16]
    assert K.NUMBA_VECTORS_DIGEST == digest, f"set NUMBA_VECTORS_DIGEST = {digest!r} in cpu_kernels.py"


def test_symmetric_4bit_path_is_taken_only_for_symmetric_tables():
    assert codebooks.tables("q4", 4).positive_mid_bits.size == 7
    assert codebooks.tables("q4_unsigned", 4).positive_mid_bits.size == 0
    mids = codebooks.tables("q4", 4).mids[:14]
    np.testing.assert_array_equal(codebooks.tables("q4", 4).positive_mid_bits.view(np.float32), mids[7:])


def test_serial_and_parallel_kernels_have_their_own_cache_files():
    """Numba names a cache file after the function and keys it by signature, not by the parallel
    flag: built from one function, both variants would load whichever was cached first."""
    from horovod_q8.backends import cpu_kernels as K

    for name in K.SERIAL:
        serial, parallel = K.SERIAL[name], K.PARALLEL[name]
        assert parallel.targetoptions.get("parallel") and not serial.targetoptions.get("parallel")
        assert serial._cache._cache_file._index_name != parallel._cache._cache_file._index_name


@pytest.mark.parametrize("n", [1, 17, 4099, 300_001])
@pytest.mark.parametrize("name,block", [("q8", None), ("q4", 99), ("twobit", None)])
def test_numba_decode_with_a_factor_or_accumulating(numba_only, name, block, n):
    """One part: (value * block scale) * factor in the decode's pass; out + value when accumulating."""
    fmt = (get(name, block_size=block) if block else get(name)).for_shape((n,))
    x = edge_tensor(n, np.random.default_rng(n))
    buf = q.quantize(x, fmt, residual=np.zeros(n, np.float32) if fmt.uses_residual else None, backend="reference")
    ref = q.dequantize(buf, fmt, n, backend="reference")
    for scale in (1.0, 0.5, 1 / 3):
        got = numba_only.decode(buf, fmt, n, out=np.full(n, np.nan, np.float32), scale=scale)
        np.testing.assert_array_equal((ref * np.float32(scale)).view(np.uint32), got.view(np.uint32))
    base = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    got = numba_only.decode(buf, fmt, n, out=base.copy(), accumulate=True)
    np.testing.assert_array_equal((base + ref).view(np.uint32), got.view(np.uint32))


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("with_residual", [True, False])
def test_read_only_arrays_encode_and_decode_through_numba(numba_only, name, with_residual):
    """TensorFlow hands the engine read-only arrays, which Numba types apart from writable ones:
    the same bytes and values as the reference, with or without a residual for threshold formats."""
    fmt = get(name).for_group("dense").for_shape((5000,))
    if with_residual and not fmt.uses_residual:
        pytest.skip("only threshold formats take a residual")
    x = edge_tensor(5000, np.random.default_rng(3))
    x.setflags(write=False)
    residual = np.zeros(5000, np.float32) if fmt.uses_residual and with_residual else None
    ref_residual = None if residual is None else residual.copy()
    buf = q.quantize(x, fmt, residual=residual, backend="cpu")
    assert np.array_equal(buf, q.quantize(x, fmt, residual=ref_residual, backend="reference"))
    buf.setflags(write=False)
    want = q.dequantize(buf, fmt, 5000, backend="reference")
    np.testing.assert_array_equal(q.dequantize(buf, fmt, 5000, backend="cpu").view(np.uint32), want.view(np.uint32))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86-64 instruction set to compile for")
def test_numba_kernels_compiled_for_avx2_alone(tmp_path):
    """LLVM lowers numba_vectors' IR per instruction set: this file's tests and the Numba sums of
    ranks again with the Numba kernels compiled for an AVX2 CPU without AVX-512
    (NUMBA_CPU_NAME=haswell, its own features), as on the CPUs whose users run them, in a cache of
    their own."""
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "", "NUMBA_CACHE_DIR": str(tmp_path)}
    sums = str(Path(__file__).with_name("test_native_codec.py")) + "::test_sum_of_ranks_in_one_pass"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, sums, "-k",
                          "not compiled_for_avx2_alone and not (sum_of_ranks and cpu)"],
                         env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:]
    probe = subprocess.run([sys.executable, "-c", "from horovod_q8.bench.common import numba_target; print(numba_target())"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert "LLVM code for haswell, haswell's own features" in probe.stdout, probe.stdout + probe.stderr


@pytest.mark.parametrize("kernels", ["cpu", "numba"])
def test_cpu_backend_takes_strided_input_and_refuses_short_arrays(kernels, request):
    """The kernels index their arrays whole: a strided x is made one run first (the reference's
    bytes), and a buffer or output shorter than the size asks is a clear error, not a read or
    write past its end."""
    from horovod_q8.backends import cpu

    if kernels == "numba":
        request.getfixturevalue("numba_only")
    n = 4096
    fmt = get("q8").for_shape((n,))
    x = np.random.default_rng(5).standard_normal(2 * n).astype(np.float32)[::2]
    buf = cpu.encode(x, fmt)
    assert np.array_equal(buf, R.encode(np.ascontiguousarray(x), fmt))
    raw = np.full(2 * n, 7.0, np.float32)
    with pytest.raises(ValueError, match="output of 2048 elements, 4096 needed"):
        cpu.decode(buf, fmt, n, out=raw[:2048])
    assert np.all(raw == 7.0)
    with pytest.raises(ValueError, match="buffer of"):
        cpu.decode(buf[:-1024], fmt, n)
    with pytest.raises(ValueError, match="buffer of"):
        cpu.decode_sum([buf, buf[:-1]], fmt, n, np.empty(n, np.float32))
    with pytest.raises(ValueError, match="output of"):
        cpu.encode(x, fmt, out=np.empty(fmt.nbytes(n) - 1, np.uint8))
    with pytest.raises(ValueError, match="one contiguous run"):
        cpu.decode(buf, fmt, n, out=raw[::2])


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_dequantize_into_a_strided_out(backend):
    """`dequantize(..., out=view)` writes the view, plain and accumulating, and nothing around
    it (a strided view's reshape is a copy: decoding there alone would lose the values)."""
    n = 3000
    fmt = get("q8").for_shape((n,))
    x = np.random.default_rng(9).standard_normal(n).astype(np.float32)
    buf = q.quantize(x, fmt, backend=backend)
    want = q.dequantize(buf, fmt, n, backend="reference")
    raw = np.full(2 * n, 5.0, np.float32)
    assert q.dequantize(buf, fmt, n, out=raw[::2], backend=backend) is not None
    np.testing.assert_array_equal(raw[::2], want)
    assert np.all(raw[1::2] == 5.0)
    q.dequantize(buf, fmt, n, out=raw[::2], accumulate=True, backend=backend)
    np.testing.assert_array_equal(raw[::2], want + want)
    grid = np.zeros((60, 50), np.float32).T  # Fortran order: not C-contiguous
    q.dequantize(buf, fmt.for_shape(grid.shape), grid.shape, out=grid, backend=backend)
    np.testing.assert_array_equal(grid.reshape(-1), want)
