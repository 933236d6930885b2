"""The mpi4py ring of `bench transfer`, under a real mpirun with 3 ranks."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_ring_allreduce_under_mpirun():
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    cmd = ["mpirun", *root, "--oversubscribe", "-np", "3", sys.executable,
           str(Path(__file__).parent / "parallel" / "ring_checks.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "OK" in out, out[-4000:]
