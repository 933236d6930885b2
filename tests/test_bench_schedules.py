"""The mpi4py schedules of `bench transfer` (ring, pipelined), under a real mpirun."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.parallel


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
@pytest.mark.parametrize("ranks", [2, 3])  # 2: allgather schedule, 3: two-phase
def test_bench_schedules_under_mpirun(ranks):
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    cmd = ["mpirun", *root, "--oversubscribe", "-np", str(ranks), sys.executable,
           str(Path(__file__).parent / "parallel" / "bench_schedule_checks.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "OK" in out, out[-4000:]
