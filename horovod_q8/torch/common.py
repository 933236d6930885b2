"""What the DDP hook and the Horovod frontend share: settings by name, seeds, the config check."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union

import torch

from horovod_q8 import formats
from horovod_q8.collective.agreement import ConfigMismatchError, check_same  # noqa: F401 (re-exported)
from horovod_q8.collective.setting import Setting
from horovod_q8.formats import layer_group


PLAIN_DTYPES = (torch.float16, torch.float32, torch.float64)  # Horovod's allreduce sums these as they are


def horovod_plain(tensor: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.dtype]]:
    """(what goes to Horovod's own allreduce, the dtype to return to or None): a float dtype that
    Horovod refuses (bfloat16) goes as float32, as the fused optimizer's buckets do."""
    if tensor.is_floating_point() and tensor.dtype not in PLAIN_DTYPES:
        return tensor.float(), tensor.dtype
    return tensor, None


def make_setting(compression: Union[str, Setting], **options) -> Setting:
    """A Setting from a format name (options as `compressor`'s) or a Setting itself."""
    if isinstance(compression, Setting):
        if options:
            raise ValueError(f"options {sorted(options)} apply to a format name, not to a Setting; "
                             "use dataclasses.replace on it instead")
        return compression
    fmt_keys = ("block_size", "rounding", "seed", "threshold", "levels")
    unknown = sorted(set(options) - set(fmt_keys) - {f.name for f in dataclasses.fields(Setting)})
    if unknown:
        known = sorted(set(fmt_keys) | {f.name for f in dataclasses.fields(Setting) if f.init and f.name != "format"})
        raise TypeError(f"unknown option(s) {unknown} for {compression!r}; options: {', '.join(known)}")
    fmt_options = {k: options.pop(k) for k in fmt_keys if k in options}
    return Setting(formats.get(compression, **fmt_options), **options)


def seed_for(base_seed: int, piece: int, step: int, rank: int) -> int:
    """Stochastic-rounding seed of one piece: differs per step, piece and rank (as TensorFlow's)."""
    return (base_seed + piece + step * 1000003 + rank * 7919) % (2 ** 32)


def group_of(t: torch.Tensor) -> str:
    return layer_group(max(t.dim(), 1))



