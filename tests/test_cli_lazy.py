"""The command line loads a subcommand's modules only when it runs: without numba (or
TensorFlow), `doctor`, `speedup` and every --help still work and say what is missing."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import cli, poisoned_env


@pytest.fixture
def broken(tmp_path):
    """PYTHONPATH where `import numba` and `import tensorflow` fail as if not installed."""
    return poisoned_env(tmp_path, ("numba", "tensorflow"))


def test_the_poison_works(broken):
    proc = subprocess.run([sys.executable, "-c", "import numba"], env=broken, capture_output=True, text=True)
    assert proc.returncode != 0 and "poisoned: numba" in proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["bench", "transfer", "--help"],
                                  ["train", "--help"], ["speedup", "--help"]])
def test_commands_that_need_neither_run_without_them(broken, argv):
    proc = cli(broken, *argv)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_doctor_reports_what_is_missing_instead_of_crashing(broken):
    proc = cli(broken, "doctor")
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("FIX") and "numba" in line for line in lines), proc.stdout  # here: does not import
    assert any(line.startswith("FIX") and "tensorflow" in line for line in lines), proc.stdout
    # the native kernels are called through the Numba backend: not reported as in use without it
    assert not any(line.split()[:2] == ["OK", "native"] for line in lines), proc.stdout
    assert proc.returncode == 1
