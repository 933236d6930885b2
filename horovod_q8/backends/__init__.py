"""Backends: `reference` (NumPy, the spec), `cpu` (the `native` AVX-512 kernels where they apply,
else Numba), `cuda` (CuPy). Same bytes from each."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from types import ModuleType

from horovod_q8 import _compat

BACKENDS = ("reference", "cpu", "cuda")


def kernel_source(name: str = "codec.cu") -> str:
    """A kernel source (kernels/): installed as package data, or kernels/ of a source checkout."""
    checkout = Path(__file__).resolve().parents[2] / "kernels" / name
    if checkout.exists():
        return checkout.read_text()
    return resources.files("horovod_q8.kernels").joinpath(name).read_text()


def check_decode_scale(scale: float, accumulate: bool) -> None:
    """Every backend's decode: a factor scales decoded values, never an accumulation."""
    if scale != 1.0 and accumulate:
        raise ValueError("decode: scale applies to decoded values, not to an accumulation")


def decode_sum_by_parts(decode, bufs, fmt, n: int, out, scale: float = 1.0):
    """out = (sum of the values of `bufs`, added in order) * float32 `scale`, with the backend's
    `decode`: the first overwrites `out`, the others add into it, then one scaling pass. The
    fused kernels give these bits."""
    for r, buf in enumerate(bufs):
        decode(buf, fmt, n, out=out, accumulate=r > 0)
    if not bufs:
        out[...] = 0
    if scale != 1.0:
        out *= out.dtype.type(scale)
    return out


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
