"""`horovod-q8 doctor` run for real: in the project venv (TensorFlow + Horovod + torch 2.0.1), in
the mirror of today's torch-only user (torch 2.11, no TensorFlow, no Horovod), and with a
framework that is installed but does not import."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from conftest import ROOT, poisoned_env

from horovod_q8 import cuda_version

MIRROR = Path(os.environ.get("HOROVOD_Q8_MIRROR_VENV", Path.home() / ".cache/horovod_q8/venv-gpu-mirror"))
MIRROR_PY = MIRROR / "bin" / "python"
needs_mirror = pytest.mark.skipif(not MIRROR_PY.exists(), reason="no mirror venv (bash scripts/setup_mirror.sh)")


def doctor(python: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    env = dict(env or os.environ)
    env.setdefault("PYTHONPATH", str(ROOT))
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return subprocess.run([python, "-m", "horovod_q8.cli", "doctor"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)


def lines(out: str) -> Dict[str, List[str]]:
    """check name -> [status, message] from the doctor's report."""
    found = {}
    for line in out.splitlines():
        m = re.match(r"^(OK|FIX|SKIP)\s+(\S+)\s+(.*)$", line)
        if m:
            found[m.group(2)] = [m.group(1), m.group(3)]
    return found


def paths(out: str) -> Dict[str, List[str]]:
    """state -> path names, from the `paths:` line."""
    line = next(line for line in out.splitlines() if line.startswith("paths: "))
    return {state: names.split(", ") for state, names in
            (part.split(": ", 1) for part in line[len("paths: "):].split("; "))}


@needs_mirror
def test_torch_only_user_passes_with_the_ddp_path_ready():
    proc = doctor(str(MIRROR_PY))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    got = lines(proc.stdout)
    assert not [n for n, (s, _) in got.items() if s == "FIX"], out
    assert got["ddp-hook"][0] == "OK" and "ddp_hook" in got["ddp-hook"][1], out
    # no numba here: said plainly, CPU tensors on the NumPy reference; the native kernels not claimed
    assert got["numba"][0] == "SKIP" and "NumPy reference, over 100x slower" in got["numba"][1], out
    assert got["native"][0] == "SKIP", out
    assert re.search(r"torch 2\.11\.\S+ \(CUDA 13\.\d\), torch.distributed backends: gloo", got["torch"][1]), out
    for name in ("tensorflow", "horovod"):
        assert got[name][0] == "SKIP" and "not installed (only needed for" in got[name][1], out
    assert "torch DDP hook" in paths(proc.stdout)["ready"], out
    assert "TensorFlow + Horovod" in paths(proc.stdout)["not installed"], out
    # CUDA 13 here (nvcc 13.0, torch cu130): the CUDA 13 wheel, not the CUDA 12 one
    assert "horovod_q8[cuda13]" in got["cupy"][1] and "cuda12" not in got["cupy"][1], out


def test_project_venv_passes_with_every_installed_path_ready():
    pytest.importorskip("horovod.tensorflow")
    proc = doctor(sys.executable)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    got = lines(proc.stdout)
    assert not [n for n, (s, _) in got.items() if s == "FIX"], out
    assert "Horovod 0.28.1 built with Gloo, MPI" in got["hvd-tensorflow"][1], out
    ready = paths(proc.stdout)["ready"]
    assert "TensorFlow + Horovod" in ready, out
    torch_here = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    if torch_here:
        assert "torch DDP hook" in ready and got["torch"][0] == "OK", out
    # what Auto would choose here, by link rate, from this machine's codec
    assert got["auto"][0] == "OK" and "Gbit/s" in got["auto"][1] and "q8 " in got["auto"][1], out


@pytest.mark.parametrize("python,poisoned,path", [
    ("mirror", "torch", "torch DDP hook"),
    ("project", "tensorflow", "TensorFlow + Horovod"),
])
def test_an_installed_framework_that_does_not_import_fails_clearly(python, poisoned, path, tmp_path):
    """torch (or TensorFlow) is there but raises on import: exit 1, one FIX line naming it,
    and the path that needs it listed as broken."""
    if python == "mirror":
        if not MIRROR_PY.exists():
            pytest.skip("no mirror venv (bash scripts/setup_mirror.sh)")
        exe = str(MIRROR_PY)
    else:
        pytest.importorskip("horovod.tensorflow")
        exe = sys.executable
    proc = doctor(exe, poisoned_env(tmp_path, [poisoned]))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    label = {"torch": "torch", "tensorflow": "TensorFlow"}[poisoned]
    status, msg = lines(proc.stdout)[poisoned]
    assert status == "FIX" and msg.startswith(f"{label} is installed but does not import (ImportError: poisoned"), out
    assert path in paths(proc.stdout)["broken"], out
    assert f"doctor: fix {poisoned}" in proc.stdout, out


def test_cupy_hint_names_the_wheel_of_the_cuda_found():
    assert "horovod_q8[cuda13] (cupy-cuda13x, for CUDA 13.0 from nvcc)" in cuda_version.cupy_hint(((13, 0), "nvcc"))
    assert "horovod_q8[cuda12] (cupy-cuda12x, for CUDA 12.4 from the driver)" in \
        cuda_version.cupy_hint(((12, 4), "the driver"))
    assert "no horovod_q8 extra" in cuda_version.cupy_hint(((11, 7), "torch.version.cuda"))
    assert "no CUDA found" in cuda_version.cupy_hint(None)
    assert cuda_version.parse("Cuda compilation tools, release 13.0, V13.0.88") == (13, 0)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here")
def test_cuda_version_reads_the_real_nvcc():
    release = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    expected = cuda_version.parse(release.split("release", 1)[1])
    assert cuda_version.nvcc() == expected
    if cuda_version.driver() is None:  # no NVIDIA driver here: nvcc decides
        assert cuda_version.found() == (expected, "nvcc")
