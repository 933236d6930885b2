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

from horovod_q8.collective import pieces as P

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
