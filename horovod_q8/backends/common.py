"""What every backend shares: where the kernel sources are, and the decode contract's helpers.
The backend modules import these from here, not from the package that registers them."""
from __future__ import annotations

from importlib import resources
from pathlib import Path


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
