"""How torch tensors reach the kernels without a copy: NumPy views on CPU, CuPy through DLPack
on CUDA, ordered on the tensor's stream; and persistent buffers that both sides can see."""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Tuple

import numpy as np
import torch

from horovod_q8 import _compat

_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32,
                 np.dtype(np.int32): torch.int32}


def require_cupy():
    """CuPy, or a sentence saying how to install it."""
    cp = _compat.cupy()
    if cp is None:
        raise RuntimeError("horovod_q8 needs CuPy (pip install cupy-cuda12x or cupy-cuda13x) for CUDA tensors")
    return cp


def as_array(t: torch.Tensor):
    """A NumPy (CPU) or CuPy (CUDA) array over the same memory as contiguous `t`."""
    t = t.detach()
    if not t.is_contiguous():
        raise ValueError("horovod_q8 views contiguous tensors only; call .contiguous() first")
    if t.device.type == "cpu":
        return t.numpy()
    if t.device.type == "cuda":
        return require_cupy().from_dlpack(t)
    raise TypeError(f"horovod_q8 has no kernels for {t.device.type} tensors (CPU and CUDA only)")


def as_tensor(a) -> torch.Tensor:
    """A torch tensor over the same memory as a NumPy or CuPy array."""
    if isinstance(a, np.ndarray):
        return torch.from_numpy(a)
    return torch.from_dlpack(a)


@contextlib.contextmanager
def kernel_stream(device: torch.device) -> Iterator[None]:
    """CuPy's kernels run on torch's current stream of `device` (so they are ordered after the
    producers of every input and before every later torch op); nothing to do on CPU."""
    if device.type != "cuda":
        yield
        return
    cp = require_cupy()
    stream = torch.cuda.current_stream(device)
    with cp.cuda.Device(device.index if device.index is not None else torch.cuda.current_device()):
        with cp.cuda.ExternalStream(stream.cuda_stream):
            yield


class TensorBuffers:
    """Persistent buffers by (key, size, dtype): torch tensors on one device (torch's allocator
    owns them, so collectives on other streams keep them alive), handed out as array views."""

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self._buffers: Dict[Tuple[str, int, str], Tuple[torch.Tensor, Any]] = {}

    def __call__(self, key: str, size: int, dtype):
        k = (key, int(size), np.dtype(dtype).str)
        if k not in self._buffers:
            t = torch.empty(int(size), dtype=_TORCH_DTYPES[np.dtype(dtype)], device=self.device)
            self._buffers[k] = (t, as_array(t))
        return self._buffers[k][1]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t, _ in self._buffers.values())
