"""Optional dependencies in one place: is NumPy's JIT, CuPy, a GPU here."""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Iterator


@functools.lru_cache(maxsize=None)
def has_numba() -> bool:
    if os.environ.get("HOROVOD_Q8_BACKEND", "").lower() == "numpy":
        return False
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


_DEVICES: list = []  # CuPy-shaped stand-ins in use (backends.cuda_host), innermost last


@contextlib.contextmanager
def device(module) -> Iterator:
    """Within this block `cupy()` is `module` and its `ndarray`s count as CuPy arrays."""
    _DEVICES.append(module)
    try:
        yield module
    finally:
        _DEVICES.remove(module)


def cupy():
    """The cupy module (or the device stand-in in use), or None when CuPy or a GPU is missing."""
    return _DEVICES[-1] if _DEVICES else _real_cupy()


@functools.lru_cache(maxsize=None)
def _real_cupy():
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            return None
        return cp
    except Exception:  # ImportError, or a CUDA driver error on a machine without GPU
        return None


def is_cupy_array(x) -> bool:
    if _DEVICES and isinstance(x, _DEVICES[-1].ndarray):
        return True
    return type(x).__module__.split(".")[0] == "cupy"
