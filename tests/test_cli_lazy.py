"""The command line loads a subcommand's modules only when it runs: without numba (or
TensorFlow), `doctor`, `speedup` and every --help still work and say what is missing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def broken(tmp_path):
    """PYTHONPATH where `import numba` and `import tensorflow` fail as if not installed."""
    for name in ("numba", "tensorflow"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    path = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path)


def cli(env, *argv):
    return subprocess.run([sys.executable, "-m", "horovod_q8.cli", *argv], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_the_poison_works(broken):
    proc = subprocess.run([sys.executable, "-c", "import numba"], env=broken, capture_output=True, text=True)
    assert proc.returncode != 0 and "no numba here" in proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["bench", "transfer", "--help"],
                                  ["train", "--help"], ["speedup", "--help"]])
def test_commands_that_need_neither_run_without_them(broken, argv):
    proc = cli(broken, *argv)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_doctor_reports_what_is_missing_instead_of_crashing(broken):
    proc = cli(broken, "doctor")
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("FIX") and "numba" in line for line in lines), proc.stdout
    assert any(line.startswith("FIX") and "tensorflow" in line for line in lines), proc.stdout
    assert proc.returncode == 1
