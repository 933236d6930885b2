"""What the DDP hook and the Horovod frontend share: settings by name, seeds, the config check."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from horovod_q8 import formats
from horovod_q8.collective.agreement import ConfigMismatchError, check_same  # noqa: F401 (re-exported)
from horovod_q8.collective.setting import Setting
from horovod_q8.formats import layer_group
from horovod_q8.options import COMPRESSOR_OPTIONS, UNSUPPORTED_OP


PLAIN_DTYPES = (torch.float16, torch.float32, torch.float64)  # Horovod's allreduce sums these as they are
FORMAT_OPTIONS = ("block_size", "rounding", "seed", "threshold", "levels")


def plain_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype Horovod's own allreduce sums `dtype` in: its own, float32 for a float dtype
    Horovod refuses (bfloat16)."""
    return torch.float32 if dtype.is_floating_point and dtype not in PLAIN_DTYPES else dtype


def horovod_plain(tensor: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.dtype]]:
    """(what goes to Horovod's own allreduce, the dtype to return to or None), by `plain_dtype`."""
    wire = plain_dtype(tensor.dtype)
    return (tensor, None) if wire == tensor.dtype else (tensor.to(wire), tensor.dtype)


def make_setting(compression: Union[str, Setting], **options) -> Setting:
    """A Setting from a format name (options as `compressor`'s) or a Setting itself."""
    if isinstance(compression, Setting):
        if options:
            raise ValueError(f"options {sorted(options)} apply to a format name, not to a Setting; "
                             "use dataclasses.replace on it instead")
        return compression
    known = FORMAT_OPTIONS + tuple(COMPRESSOR_OPTIONS)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown} for {compression!r}; options: {', '.join(sorted(known))}")
    fmt_options = {k: options.pop(k) for k in FORMAT_OPTIONS if k in options}
    return Setting(formats.get(compression, **fmt_options), **options)


def seed_for(base_seed: int, piece: int, step: int, rank: int) -> int:
    """Stochastic-rounding seed of one piece: differs per step, piece and rank (as TensorFlow's)."""
    return (base_seed + piece + step * 1000003 + rank * 7919) % (2 ** 32)


def group_of(t: torch.Tensor) -> str:
    return layer_group(max(t.dim(), 1))


def check_op(op) -> None:
    """Refuse an op that cannot be computed from quantized codes (None: Horovod's Average)."""
    import horovod.torch as hvd

    if op is not None and op not in (hvd.Average, hvd.Sum):
        raise ValueError(UNSUPPORTED_OP)
