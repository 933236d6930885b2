"""Real Horovod processes: the scripts in tests/parallel/ under horovodrun (Gloo and MPI)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

pytest.importorskip("horovod.tensorflow")
pytestmark = pytest.mark.parallel

HERE = Path(__file__).parent / "parallel"
ALL = "q8,q8_linear,q8_mantissa,q8_static_tree,q4,twobit,q4_threshold"


def horovodrun() -> str:
    found = Path(sys.executable).parent / "horovodrun"
    return str(found) if found.exists() else shutil.which("horovodrun")


def run(np_: int, script: str, *args: str, controller: str = "--gloo", timeout: int = 1200,
        env: Optional[dict] = None):
    cmd = [horovodrun(), "-np", str(np_), "-H", f"localhost:{np_}", controller,
           sys.executable, str(HERE / script), *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    out = proc.stdout + proc.stderr
    return proc.returncode, out


def assert_ok(rc: int, out: str) -> None:
    """The scripts raise on any failed check: the verdict is the exit code."""
    assert rc == 0, out[-6000:]


@pytest.mark.parametrize("n", [2, 3])
def test_allreduce_every_compression(n):
    assert_ok(*run(n, "allreduce_checks.py", ALL))


def test_keras_fit_gloo_2_ranks():
    assert_ok(*run(2, "keras_training.py", "q8,q4,q4_threshold,twobit"))


def test_keras_fit_mpi_3_ranks():
    assert_ok(*run(3, "keras_training.py", "q8", controller="--mpi"))


@pytest.mark.parametrize("what", ["block", "format", "min_size", "horovod_none", "optimizer_none", "fusion_bytes"])
def test_mismatched_settings_stop_with_a_clear_error(what):
    t0 = time.monotonic()
    rc, out = run(2, "config_mismatch.py", what, timeout=300)
    assert rc == 0, out[-4000:]
    assert out.count("MISMATCH-DETECTED") == 2, out[-4000:]
    expected = {"block": "block_size=1024", "min_size": "min_size=1024", "fusion_bytes": "fusion_bytes=",
                "horovod_none": "'q8' here vs 'none' there", "optimizer_none": "'q8' here vs 'none' there"}.get(what)
    assert (expected in out) if expected else ("'q8' here vs 'q4' there" in out or "'q4' here vs 'q8' there" in out)
    assert time.monotonic() - t0 < 120


@pytest.mark.parametrize("what,expected", [("variable_order", "3 gradients, 0 of them None"),
                                           ("unused_on_one_rank", "3 gradients, 1 of them None")])
def test_ranks_reducing_different_gradients_stop_with_a_clear_error(what, expected):
    """The same buckets but other variables at a position (another order, None on one rank only):
    summed, they would mix unrelated gradients; Horovod's own allreduce would wait forever."""
    rc, out = run(2, "config_mismatch.py", what, timeout=300)
    assert rc == 0 and out.count("MISMATCH-DETECTED") == 2, out[-4000:]
    assert "reduce different gradients" in out and expected in out, out[-4000:]


@pytest.mark.parametrize("what,expected", [("auto_vs_q8", "'q8' there"), ("auto_override", "override=None here vs 'q8' there"),
                                           ("auto_allow", "allow=")])
def test_auto_mismatch_stops_every_rank_with_a_clear_error(what, expected):
    t0 = time.monotonic()
    rc, out = run(2, "config_mismatch.py", what, timeout=300)
    assert rc == 0, out[-4000:]
    assert out.count("MISMATCH-DETECTED") == 2, out[-4000:]
    assert expected in out or expected.replace("here", "there") in out, out[-4000:]
    assert time.monotonic() - t0 < 120


def test_auto_trains_resumes_with_the_same_choices_and_obeys_the_override(tmp_path):
    """Auto under horovodrun: fused and per-tensor paths, identical ranks, the sums of the chosen
    fixed compressor; a resumed run restores the calibration (no measuring) and chooses the same."""
    ck = str(tmp_path / "auto")
    rc, trained = run(2, "auto_checks.py", "train", ck)
    assert_ok(rc, trained)
    assert "calibration measured" in trained and "horovod_q8 Auto: 1,024-" in trained, trained[-4000:]
    rc, resumed = run(2, "auto_checks.py", "resume", ck)
    assert_ok(rc, resumed)
    assert "calibration restored" in resumed, resumed[-4000:]
    fingerprint = [ln.split("AUTO-FINGERPRINT ", 1)[1] for out in (trained, resumed)
                   for ln in out.splitlines() if "AUTO-FINGERPRINT " in ln]
    assert len(fingerprint) == 2 and fingerprint[0] == fingerprint[1], fingerprint
    assert_ok(*run(2, "auto_checks.py", "forced", ck, env={"HOROVOD_Q8_AUTO": "q4"}))


def test_rank_without_horovod_q8_ends_the_job_instead_of_hanging():
    """Rank 1 calls Horovod's allreduce directly: our code cannot see it and Horovod's collectives
    cannot time out; the agreement's watchdog ends the job with a message."""
    t0 = time.monotonic()
    rc, out = run(2, "config_mismatch.py", "horovod_unwrapped", timeout=300,
                  env={"HOROVOD_Q8_CHECK_TIMEOUT_S": "20"})
    took = time.monotonic() - t0
    assert rc != 0, out[-4000:]
    assert "rank 0 waited 20 s for every rank at the collective 'horovod_q8.agree.allreduce.1'" in out, out[-4000:]
    assert "Horovod's own compression, or horovod_q8 not imported" in out, out[-4000:]
    assert took < 200, took
