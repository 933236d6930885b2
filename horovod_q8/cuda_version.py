"""Which CUDA this host has, and so which CuPy wheel (horovod_q8's `cuda12` / `cuda13` extra) fits."""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from typing import Optional, Tuple

Version = Tuple[int, int]
EXTRAS = {12: "cuda12", 13: "cuda13"}  # setup.py's extras_require


def driver() -> Optional[Version]:
    """The newest CUDA the NVIDIA driver runs (cuDriverGetVersion; no GPU needed), or None."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    v = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(v)) != 0 or v.value <= 0:
        return None
    return v.value // 1000, v.value % 1000 // 10


def nvcc() -> Optional[Version]:
    """The CUDA toolkit's release from `nvcc --version`, or None."""
    exe = shutil.which("nvcc")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse(out.split("release", 1)[-1]) if "release" in out else None


def torch_cuda() -> Optional[Version]:
    """The CUDA that an already imported torch was built with (torch.version.cuda), or None."""
    torch = sys.modules.get("torch")
    return parse(getattr(getattr(torch, "version", None), "cuda", None) or "")


def parse(text: str) -> Optional[Version]:
    """(major, minor) from the first `N.M` in text."""
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def found() -> Optional[Tuple[Version, str]]:
    """The host's CUDA and where it was read: the driver (what can run) first, then the
    toolkit (nvcc), then the CUDA torch was built with (its wheel brings its own runtime)."""
    for source, probe in (("the driver", driver), ("nvcc", nvcc), ("torch.version.cuda", torch_cuda)):
        version = probe()
        if version:
            return version, source
    return None


def cupy_hint(found_version: Optional[Tuple[Version, str]]) -> str:
    """What to install for CuPy on this host, naming the CUDA version and where it came from."""
    if found_version is None:
        return "no CUDA found (no driver, nvcc or CUDA torch); on a GPU host: pip install horovod_q8[cuda13] " \
               "for CUDA 13 (cupy-cuda13x) or horovod_q8[cuda12] for CUDA 12 (cupy-cuda12x)"
    (major, minor), source = found_version
    extra = EXTRAS.get(major)
    if extra is None:
        return (f"CUDA {major}.{minor} (from {source}) has no horovod_q8 extra: "
                f"pip install cupy-cuda{major}x if CuPy publishes one; horovod_q8 is tested with CUDA 12 and 13")
    return f"pip install horovod_q8[{extra}] (cupy-cuda{major}x, for CUDA {major}.{minor} from {source})"
