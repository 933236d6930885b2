"""Optional dependencies in one place: is NumPy's JIT, CuPy, a GPU here."""
from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=None)
def has_numba() -> bool:
    if os.environ.get("HOROVOD_Q8_BACKEND", "").lower() == "numpy":
        return False
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def cupy():
    """The cupy module, or None when CuPy or a usable GPU is missing."""
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            return None
        return cp
    except Exception:  # ImportError, or a CUDA driver error on a machine without GPU
        return None


def is_cupy_array(x) -> bool:
    return type(x).__module__.split(".")[0] == "cupy"
