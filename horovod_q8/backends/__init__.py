"""Backends: `reference` (NumPy, the spec), `cpu` (the `native` AVX-512 kernels where they apply,
else Numba), `cuda` (CuPy). Same bytes from each."""
from __future__ import annotations

from types import ModuleType

from horovod_q8 import _compat
from horovod_q8.backends.common import check_decode_scale, decode_sum_by_parts, kernel_source  # noqa: F401

BACKENDS = ("reference", "cpu", "cuda")


def get(name: str) -> ModuleType:
    """The backend module called `name`."""
    if name == "reference":
        from horovod_q8.backends import reference as mod
    elif name == "cpu":
        if not _compat.has_numba():
            raise RuntimeError("the cpu backend needs numba (pip install numba)")
        from horovod_q8.backends import cpu as mod
    elif name == "cuda":
        from horovod_q8.backends import cuda as mod
    else:
        raise ValueError(f"unknown backend {name!r}; choose from {BACKENDS}")
    return mod


def for_array(x) -> ModuleType:
    """The fastest backend for where `x` lives: cuda for CuPy arrays, else cpu or reference."""
    if _compat.is_cupy_array(x):
        return get("cuda")
    return get("cpu" if _compat.has_numba() else "reference")
