"""What every backend shares: where the kernel sources are, and the decode contract's helpers.
The backend modules import these from here, not from the package that registers them."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Optional


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


def check_sizes(what: str, fmt, n: int, bufs=(), out=None, out_min: Optional[int] = None) -> None:
    """A kernel indexes its arrays whole: a buffer shorter than fmt.nbytes(n) bytes, or an output
    shorter than out_min elements (n where not given), would be read or written past its end."""
    need = fmt.nbytes(n)
    for buf in bufs:
        if buf.size < need:
            raise ValueError(f"{what}: {fmt.name} buffer of {buf.size} bytes, {need} needed for {n} elements")
    want = n if out_min is None else out_min
    if out is not None and out.size < want:
        raise ValueError(f"{what}: output of {out.size} elements, {want} needed for {n} elements")
    if out is not None and not out.flags.c_contiguous:
        raise ValueError(f"{what}: the output must be one contiguous run (a strided view was given; "
                         f"horovod_q8.dequantize takes one)")


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
