"""The package itself: importable without TensorFlow, Horovod or CuPy; the command exists."""
from __future__ import annotations

import subprocess
import sys


def test_import_needs_only_numpy():
    code = ("import sys, horovod_q8, horovod_q8.codec, horovod_q8.collective; "
            "bad = [m for m in ('tensorflow', 'horovod', 'cupy') if m in sys.modules]; "
            "assert not bad, bad; print(horovod_q8.format_names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "q4_threshold" in out.stdout


def test_console_command_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "horovod_q8.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for sub in ("train", "compare", "report", "bench"):
        assert sub in out.stdout


def test_unknown_compression_is_refused_by_the_cli():
    out = subprocess.run([sys.executable, "-m", "horovod_q8.cli", "train", "mnist", "--compression", "q7"],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "invalid choice: 'q7'" in out.stderr
