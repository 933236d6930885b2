"""A host device for the CUDA backend: kernels/codec.cu, unchanged, compiled by the system C++
compiler with kernels/cuda_host.h and launched on the CPU, behind a CuPy-shaped module.

`backends.cuda` runs on it exactly as on CuPy: the same grids, block sizes, argument order and
scale buffers reach the same kernel source. Arrays are NumPy arrays of a `DeviceArray` subclass,
allocated with guard bytes (checked after every launch) and poisoned when `empty`; elementwise
operations on them run with float32 subnormals flushed, as CuPy's kernels are compiled
(-ftz=true); mixing them with plain NumPy arrays fails as it does on CuPy. Use:

    with cuda_host.device():      # backends and the engine now see a "GPU"
        ...
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import itertools
import os
import platform
import re
import shutil
import subprocess
import threading
from importlib import resources
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np

from horovod_q8 import _compat
from horovod_q8.backends import native
from horovod_q8.backends.common import kernel_source

FLAGS = ("-std=c++14", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math",
         "-Wall", "-Wextra", "-Werror")
GUARD = 256  # bytes of canary on each side of every allocation; also CuPy's allocation alignment
_ALLOCATIONS = itertools.count()
_KERNEL = re.compile(r"__global__\s+void\s+(\w+)\s*\(")
_SCALARS = {"i": (np.int32, ctypes.c_int), "I": (np.uint32, ctypes.c_uint), "q": (np.int64, ctypes.c_longlong),
            "Q": (np.uint64, ctypes.c_ulonglong), "f": (np.float32, ctypes.c_float), "d": (np.float64, ctypes.c_double)}
_LAUNCH = threading.Lock()  # one grid at a time: the emulator's scheduler is process-wide
_SEEDS = itertools.count()


def header_path() -> Path:
    """kernels/cuda_host.h of a source checkout, else the installed package's copy."""
    checkout = Path(__file__).resolve().parents[2] / "kernels" / "cuda_host.h"
    if checkout.exists():
        return checkout
    return Path(str(resources.files("horovod_q8.kernels").joinpath("cuda_host.h")))


def compiler() -> Optional[str]:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def unavailable() -> Optional[str]:
    """Why the host build cannot run here, or None."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the CUDA host build needs x86-64 (this is {platform.machine()})"
    if compiler() is None:
        return "the CUDA host build needs a C++ compiler (g++)"
    if not header_path().exists():
        return f"{header_path()} is missing"
    return None


def kernel_names(code: str) -> list[str]:
    return _KERNEL.findall(code)


def translation_unit(code: str) -> str:
    """The C++ file the host build compiles: the header, the kernel source as given, and one
    exported launcher per __global__ function."""
    header = header_path()
    digest = hashlib.sha256(header.read_bytes()).hexdigest()  # the build cache's key sees the header
    return "\n".join([f"// cuda_host.h sha256 {digest}", f'#include "{header}"', '#line 1 "codec.cu"', code, "",
                      *(f"HQ8_HOST_KERNEL({n})" for n in kernel_names(code)), ""])


class CompileError(RuntimeError):
    """The host compiler rejected a kernel source."""


@functools.lru_cache(maxsize=None)
def _library(code: str) -> ctypes.CDLL:
    why = unavailable()
    if why:
        raise RuntimeError(why)
    try:
        path = native.build("codec_host.cpp", translation_unit(code), compiler(), FLAGS)
    except subprocess.CalledProcessError as e:
        raise CompileError(f"host build of the CUDA source failed:\n{e.stderr}") from None
    lib = ctypes.CDLL(str(path))
    lib.hq8_host_set_ftz.restype = ctypes.c_uint
    lib.hq8_host_set_ftz.argtypes = [ctypes.c_int]
    return lib


@contextlib.contextmanager
def flushed(lib: ctypes.CDLL) -> Iterator[None]:
    """Float32 subnormals flushed to zero on this thread (x86 DAZ and FTZ), as in CuPy's kernels."""
    old = lib.hq8_host_set_ftz(1)
    try:
        yield
    finally:
        lib.hq8_host_set_ftz(1 if old & 0x8040 == 0x8040 else 0)


class DeviceArray(np.ndarray):
    """An array "on the device": a NumPy array whose ufuncs run as CuPy's do (subnormals
    flushed) and refuse plain NumPy operands, as CuPy does."""

    def __array_finalize__(self, obj) -> None:
        self._root = getattr(obj, "_root", None)
        self._canary = getattr(obj, "_canary", None)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        for a in itertools.chain(inputs, kwargs.get("out", ())):
            if isinstance(a, np.ndarray) and not isinstance(a, DeviceArray) and a.ndim > 0:
                raise TypeError(f"{ufunc.__name__}: a host (NumPy) array mixed with device arrays; "
                                "CuPy refuses this (cp.asarray it first)")
        args = [a.view(np.ndarray) if isinstance(a, DeviceArray) else a for a in inputs]
        outs = kwargs.get("out")
        if outs is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) for o in outs)
        with flushed(_ftz_library()):
            result = getattr(ufunc, method)(*args, **kwargs)
        if outs is not None:
            return outs[0] if len(outs) == 1 else outs
        if isinstance(result, np.ndarray):
            return _adopt(result)
        return result

    def __array_function__(self, func, types, args, kwargs):
        """NumPy functions on device arrays give device arrays, as CuPy's dispatch does."""
        def host(a):
            if isinstance(a, DeviceArray):
                return a.view(np.ndarray)
            return type(a)(host(b) for b in a) if isinstance(a, (list, tuple)) else a
        result = func(*host(args), **{k: host(v) for k, v in kwargs.items()})
        return _adopt(result) if isinstance(result, np.ndarray) else result


@functools.lru_cache(maxsize=None)
def _ftz_library() -> ctypes.CDLL:
    """The shipped kernels' host build, whose MXCSR switch elementwise operations use (read and
    built once, not per operation)."""
    return _library(kernel_source())


def _adopt(a: np.ndarray) -> DeviceArray:
    out = empty(a.shape, a.dtype)
    out[...] = a
    return out


def _canary(k: int) -> np.ndarray:
    """GUARD bytes: float32 NaNs (a kernel reading past an end gets NaN, which shows) whose low
    16 bits vary with the allocation (a stray byte write rarely matches)."""
    low = (np.uint32(40503) * np.uint32(k + 1) + np.arange(GUARD // 4, dtype=np.uint32)) & np.uint32(0xFFFF)
    return (np.uint32(0xFFC10000) | low).view(np.uint8)


def _guards(root: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return root[:GUARD], root[root.size - GUARD:]


def empty(shape, dtype=np.float32) -> DeviceArray:
    """Device memory: 256-byte aligned, guarded on both sides, poisoned (0xFF: NaN as float)."""
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 3 * GUARD, np.uint8)
    start = -raw.ctypes.data % GUARD
    root = raw[start:start + nbytes + 2 * GUARD]
    canary = _canary(next(_ALLOCATIONS))
    root[:GUARD], root[GUARD + nbytes:] = canary, canary
    root[GUARD:GUARD + nbytes] = 0xFF
    arr = root[GUARD:GUARD + nbytes].view(dtype).reshape(shape).view(DeviceArray)
    arr._root, arr._canary = root, canary
    return arr


def zeros(shape, dtype=np.float32) -> DeviceArray:
    a = empty(shape, dtype)
    a.view(np.ndarray)[...] = 0
    return a


def ones(shape, dtype=np.float32) -> DeviceArray:
    a = empty(shape, dtype)
    a.view(np.ndarray)[...] = 1
    return a


def empty_like(a, dtype=None) -> DeviceArray:
    return empty(a.shape, a.dtype if dtype is None else dtype)


def zeros_like(a, dtype=None) -> DeviceArray:
    return zeros(a.shape, a.dtype if dtype is None else dtype)


def asarray(a, dtype=None) -> DeviceArray:
    """A device array: `a` itself when already one of the right dtype, else a copy to the device."""
    if isinstance(a, DeviceArray) and (dtype is None or a.dtype == np.dtype(dtype)):
        return a
    host = np.asarray(a.view(np.ndarray) if isinstance(a, DeviceArray) else a, dtype=dtype)
    out = empty(host.shape, host.dtype)
    out.view(np.ndarray)[...] = host
    return out


def ascontiguousarray(a, dtype=None) -> DeviceArray:
    a = asarray(a, dtype)
    return a if a.flags.c_contiguous else asarray(np.ascontiguousarray(a.view(np.ndarray)))


def asnumpy(a) -> np.ndarray:
    return np.array(a.view(np.ndarray) if isinstance(a, DeviceArray) else a, copy=True)


def isfinite(a) -> DeviceArray:
    return np.isfinite(a)


def check_guards(arrays: Sequence) -> None:
    """Raise if a launch wrote outside any of these arrays' allocations."""
    for a in arrays:
        root = getattr(a, "_root", None)
        if root is None:
            continue
        for side, g in zip(("before", "after"), _guards(root)):
            bad = np.flatnonzero(g != a._canary)
            if bad.size:
                raise RuntimeError(f"kernel wrote {bad.size} byte(s) {side} a {a.dtype} allocation of "
                                   f"{root.size - 2 * GUARD} bytes (first at guard offset {bad[0]})")


class Kernel:
    """A RawKernel stand-in: `kernel(grid, block, args)` runs the host build's launcher."""

    def __init__(self, lib: ctypes.CDLL, name: str):
        try:
            self._launch = getattr(lib, f"hq8_launch_{name}")
        except AttributeError:
            raise AttributeError(f"no __global__ function {name!r} in the kernel source") from None
        sig = getattr(lib, f"hq8_signature_{name}")
        sig.restype = ctypes.c_char_p
        self.name, self.signature = name, sig().decode()
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong,
                                 ctypes.c_char_p, ctypes.c_size_t]

    def _marshal(self, args: Sequence) -> tuple[list, list]:
        """One ctypes value per parameter, each checked against the kernel's parameter type (CuPy
        would pass a wrong-sized scalar's bytes as they are)."""
        if len(args) != len(self.signature):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(self.signature)} parameters")
        values, arrays = [], []
        for i, (code, a) in enumerate(zip(self.signature, args)):
            if code == "p":
                if not isinstance(a, DeviceArray):
                    raise TypeError(f"{self.name}: argument {i} must be a device array, not {type(a).__name__}")
                values.append(ctypes.c_void_p(a.ctypes.data))
                arrays.append(a)
            else:
                want, ctype = _SCALARS[code]
                if not isinstance(a, np.generic) or a.dtype != np.dtype(want):
                    raise TypeError(f"{self.name}: argument {i} must be {np.dtype(want).name} "
                                    f"(the kernel's parameter), not {type(a).__name__}")
                values.append(ctype(a.item()))
        return values, arrays

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None) -> None:
        if shared_mem:
            raise ValueError("dynamic shared memory is not used by these kernels")
        g = (list(grid) + [1, 1])[:3]
        b = (list(block) + [1, 1])[:3]
        values, arrays = self._marshal(args)
        ptrs = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        err = ctypes.create_string_buffer(512)
        with _LAUNCH:
            rc = self._launch((ctypes.c_uint * 3)(*g), (ctypes.c_uint * 3)(*b), ptrs,
                              int(os.environ.get("HOROVOD_Q8_HOST_SEED", "0")) + next(_SEEDS), err, len(err))
        if rc:
            raise RuntimeError(f"{self.name}<<<{tuple(g)}, {tuple(b)}>>>: {err.value.decode()}")
        check_guards(arrays)


class RawModule:
    """cupy.RawModule's shape: compiles `code` (the host build) and hands out its kernels."""

    def __init__(self, code: str, options: Sequence[str] = (), **_):
        self.options = tuple(options)
        self._lib = _library(code)

    def get_function(self, name: str) -> Kernel:
        return Kernel(self._lib, name)


class HostDevice:
    """The CuPy-shaped module: only what the CUDA backend and the engine use, nothing else."""

    ndarray = DeviceArray
    float32, float64, uint8, uint32, int32, int64 = (np.float32, np.float64, np.uint8, np.uint32,
                                                    np.int32, np.int64)
    RawModule = RawModule
    empty, zeros, ones = staticmethod(empty), staticmethod(zeros), staticmethod(ones)
    empty_like, zeros_like = staticmethod(empty_like), staticmethod(zeros_like)
    asarray, ascontiguousarray, asnumpy = (staticmethod(asarray), staticmethod(ascontiguousarray),
                                          staticmethod(asnumpy))
    isfinite = staticmethod(isfinite)
    is_host_device = True

    def __repr__(self) -> str:
        return "<horovod_q8 CUDA host device (kernels/codec.cu on the CPU)>"


@contextlib.contextmanager
def device() -> Iterator[HostDevice]:
    """Within this block, CuPy is the host device: `_compat.cupy()` returns it and its arrays
    are "CuPy arrays" to every backend."""
    why = unavailable()
    if why:
        raise RuntimeError(why)
    dev = HostDevice()
    with _compat.device(dev):
        yield dev
