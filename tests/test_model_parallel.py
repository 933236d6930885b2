"""Model parallelism with compressed activations: the byte codec in one process, the
collectives, ShardedDense and the hybrid example under real horovodrun processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from horovod_q8 import codec
from horovod_q8.collective import pieces as P
from horovod_q8.formats import codebooks

HERE = Path(__file__).parent / "parallel"
REPO = Path(__file__).resolve().parent.parent
ACTIVATION_FORMATS = "none,q8,q8_linear,q8_mantissa,q8_static_tree,q4"


@pytest.mark.parametrize("name", ACTIVATION_FORMATS.split(","))
def test_pieces_round_trip_and_rank_order_sum(name, rng):
    fmt = P.resolve(name)
    parts = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(3)]
    buf, splits = P.encode_pieces(fmt, parts)
    assert list(splits) == [P.nbytes(fmt, 15)] * 3 and buf.size == splits.sum()
    decoded = P.decode_pieces(fmt, buf, [(3, 5)] * 3)
    total = P.sum_pieces(fmt, buf, (3, 5), 3)
    np.testing.assert_array_equal(total, (decoded[0] + decoded[1]) + decoded[2])
    tol = 0 if fmt is None else 0.3 if fmt.bits == 4 else 0.05
    for d, p in zip(decoded, parts):
        assert np.abs(d - p).max() <= tol * np.abs(p).max()


def _max_gap(fmt) -> float:
    t = codebooks.tables(fmt.codebook, fmt.bits)
    return float(np.diff(t.values[: t.size]).max())


@pytest.mark.parametrize("name", ACTIVATION_FORMATS.split(",")[1:])
def test_non_negative_pieces_use_the_unsigned_codebook(name, rng):
    """ReLU-like pieces: unsigned codebook (marked by negative scales), zeros exact, every
    element within half the unsigned table's widest gap, over many draws and block counts."""
    fmt = P.resolve(name)
    ufmt = P.unsigned(fmt)
    assert codebooks.tables(ufmt.codebook, ufmt.bits).values.min() == 0.0
    for draw in range(20):
        n = int(rng.integers(1, 5000))
        x = np.maximum(rng.standard_normal(n), 0).astype(np.float32) * rng.lognormal(0, 1, n).astype(np.float32)
        buf = P.encode(fmt, x)
        assert buf.size == P.nbytes(fmt, n)
        scales = buf[: 4 * fmt.n_blocks(n)].view(np.float32)
        assert np.all(np.signbit(scales))
        y = P.decode(fmt, buf, x.shape)
        assert np.all(y >= 0) and np.all(y[x == 0] == 0)
        b = fmt.block_for(n)
        absmax = np.repeat(-scales, b)[:n]
        assert np.all(np.abs(y - x) <= absmax * _max_gap(ufmt) / 2 * (1 + 1e-5))
        assert buf[: 4 * fmt.n_blocks(n)].view(np.float32)[0] == scales[0]  # decode left buf alone


@pytest.mark.parametrize("name", ["q8", "q8_linear", "q8_static_tree"])
def test_unsigned_mode_halves_the_error_of_relu_outputs(name, rng):
    fmt = P.resolve(name)
    x = np.maximum(rng.standard_normal(100000), 0).astype(np.float32)
    signed = codec.dequantize(codec.quantize(x, fmt), fmt, x.size)
    unsigned = P.decode(fmt, P.encode(fmt, x), x.shape)
    assert np.abs(unsigned - x).mean() < 0.6 * np.abs(signed - x).mean()


def test_signed_or_non_finite_pieces_keep_the_signed_codebook():
    fmt = P.resolve("q8")
    for x, expect in [([-1.0, 2.0], None), ([np.nan, 1.0], "nan"), ([np.inf, 1.0], "nonfinite"),
                      ([0.0, 0.0], "zeros")]:
        x = np.array(x, np.float32)
        buf = P.encode(fmt, x)
        y = P.decode(fmt, buf, x.shape)
        assert bool(np.signbit(buf[:4].view(np.float32)[0])) == (expect == "zeros")
        if expect in ("nan", "nonfinite"):
            assert not np.all(np.isfinite(y))
        elif expect == "zeros":
            np.testing.assert_array_equal(y, 0)
        else:
            assert y[0] < 0 < y[1]


def test_uncompressed_bytes_are_the_float32_bytes(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_array_equal(P.decode(None, P.encode(None, x), x.shape), x)
    assert P.nbytes(None, 10) == 40 and P.encode(None, np.zeros((0, 3), np.float32)).size == 0


def test_threshold_formats_are_refused_for_activations():
    for name in ("twobit", "q4_threshold"):
        with pytest.raises(ValueError, match="threshold format"):
            P.resolve(name)


def test_split_sizes_and_byte_formulas():
    assert P.split_sizes(7, 2) == [4, 3] and P.split_sizes(9, 3) == [3, 3, 3]
    assert P.offsets([4, 3]) == [0, 4, 7]
    q8 = P.resolve("q8")
    # 2 ranks, 64 rows, 256 units: forward allgather 64*128, backward the other rank's slice
    assert P.gather_units_bytes(None, 64, [128, 128], 0) == (4 * 8192, 4 * 8192)
    assert P.gather_units_bytes(q8, 64, [128, 128], 0) == (8192 + 32, 8192 + 32)
    assert P.gather_rows_bytes(None, [2, 3], 10, 1) == (120, 80)
    assert P.to_row_owners_bytes(None, [2, 3], [4, 3], 0) == (4 * 12, 4 * 6)


def horovodrun(np_: int, script: str, *args: str, timeout: int = 900):
    exe = Path(sys.executable).parent / "horovodrun"
    cmd = [str(exe) if exe.exists() else "horovodrun", "-np", str(np_), "-H", f"localhost:{np_}",
           "--gloo", sys.executable, *([str(HERE / script)] if script.endswith(".py") else ["-m", script]),
           *args]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parallel
def test_sharded_dense_matches_dense_2_ranks():
    rc, out = horovodrun(2, "model_parallel_checks.py", ACTIVATION_FORMATS)
    assert rc == 0 and "[0]<stdout>:OK" in out, out[-6000:]


@pytest.mark.parallel
def test_hybrid_step_equals_one_process_on_the_whole_batch():
    rc, out = horovodrun(2, "model_parallel_hybrid.py", "none:none,q8:none,q8:q8")
    assert rc == 0 and "[0]<stdout>:OK" in out, out[-6000:]


@pytest.mark.parallel
def test_hybrid_training_learns(tmp_path):
    import datagen

    data = datagen.mnist(tmp_path / "mnist", n_train=1024, n_test=256)
    summary = tmp_path / "hybrid.json"
    rc, out = horovodrun(2, "horovod_q8.cli", "hybrid", "--data-dir", str(data), "--epochs", "3",
                         "--batch-size", "32", "--lr", "0.01", "--warmup-epochs", "0",
                         "--compression", "q8", "--fused", "--activation-compression", "q8",
                         "--results-json", str(summary))
    assert rc == 0 and summary.exists(), out[-6000:]
    s = json.loads(summary.read_text())
    losses = s["loss_per_epoch"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert s["test_accuracy"] > 0.3, s  # 10 classes; 3 short epochs
    # every activation byte counted while training matches the static formula
    assert s["activation_bytes_per_step_measured"] == s["bytes_per_step"], s
