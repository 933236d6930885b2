"""`Auto` for PyTorch: horovod.torch's `compression=` (per tensor) and the DDP hook (per bucket).

Each tensor or bucket goes as the allowed format the cost model predicts fastest on this
cluster (`collective/auto.py`); calibration runs at first use, on every rank at the same point,
with the collectives that path really uses (Horovod's, or the process group's).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch

from horovod_q8.collective.auto import (DEFAULT_ALLOW, Auto, AutoCompressorBase, AutoPlan, Probe, make_auto,
                                        probe_values, recalibrate_all)
from horovod_q8.torch import generation, hvd_agreement
from horovod_q8.torch.common import horovod_plain, make_setting
from horovod_q8.torch.tensors import require_cupy

_LOG = logging.getLogger("horovod_q8")
_PROBES = generation.Numbering()
generation.on_new(recalibrate_all)  # a calibration measured the old ranks; every rank measures again


def settings_of(auto: Auto) -> Dict[str, Any]:
    """format name -> its Setting (None for Horovod's/torch's own none and fp16)."""
    return {a: None if a in ("none", "fp16") else make_setting(a, min_size=auto.min_size, **auto.options_for(a))
            for a in auto.allow}


def _tensor_probe(ranks: int, send, allgather, gather, device: torch.device = torch.device("cpu")) -> Probe:
    """A Probe over tensors on `device`: send(name, t) reduces t as `name`; values are random
    normal (a codec's time depends on them), the same on every rank. On a GPU the codec is timed
    with CuPy's kernels, as the engine runs them there."""
    cache: Dict[Any, torch.Tensor] = {}

    def values(n: int, dtype) -> torch.Tensor:
        if (n, dtype) not in cache:
            x = torch.from_numpy(probe_values(n))
            cache[(n, dtype)] = (x.view(torch.uint8)[:n].clone() if dtype == torch.uint8 else x).to(device)
        return cache[(n, dtype)]

    def fp16_roundtrip(n: int) -> None:
        values(n, torch.float32).half().float()

    xp, sync = np, (lambda: None)
    if device.type == "cuda":
        xp, sync = require_cupy(), (lambda: torch.cuda.synchronize(device))
    return Probe(ranks, lambda name, n: send(name, values(n, torch.float32).clone()),
                 lambda nbytes: allgather(values(nbytes, torch.uint8)), gather, fp16_roundtrip, xp, sync)


def horovod_probe(compressors: Dict[str, Any], device: torch.device = torch.device("cpu")) -> Probe:
    """horovod.torch's collectives over tensors on `device` (the gradients'); send() is
    `hvd.allreduce` with the compressor Auto would use, without its warm-up (a warm-up step
    would send the probe uncompressed) and with a state of its own."""
    import horovod.torch as hvd

    k = _PROBES()
    compressors = {a: c if c is None else dataclasses.replace(c, warmup_steps=0, state=None)
                   for a, c in compressors.items()}

    def send(name: str, t: torch.Tensor) -> None:
        comp = compressors.get(name) or getattr(hvd.Compression, name)  # none: the link, allowed or not
        hvd.allreduce(t, op=hvd.Average, compression=comp, name=f"horovod_q8.auto.{k}.{name}.{t.numel()}")

    return _tensor_probe(
        hvd.size(), send, lambda t: hvd.allgather(t, name=f"horovod_q8.auto.{k}.allgather.{t.numel()}"),
        lambda obj: hvd.allgather_object(obj, name=f"horovod_q8.auto.{k}.figures"), device)


def dist_probe(send, group=None, device: torch.device = torch.device("cpu")) -> Probe:
    """torch.distributed's collectives over `group`, on the buckets' device; send(name, t): the
    DDP hook's path for a bucket sent as `name`."""
    import torch.distributed as dist

    size = dist.get_world_size(group)

    def allgather(t: torch.Tensor) -> None:
        dist.all_gather([torch.empty_like(t) for _ in range(size)], t, group=group)

    def gather(obj):
        out: list = [None] * size
        dist.all_gather_object(out, obj, group=group)
        return out

    return _tensor_probe(size, send, allgather, gather, device)


def log_on_rank0(rank: int):
    return (lambda line: _LOG.warning("%s", line)) if rank == 0 else None


@dataclass(frozen=True, repr=False)
class AutoCompressor(AutoCompressorBase):
    """An `Auto` setting as a horovod.torch compressor: per tensor in `hvd.allreduce`, per bucket
    in horovod_q8's fused optimizer (`optimizer.Reducer`); equal settings share a plan."""

    def _compressors(self) -> dict:
        from horovod_q8.torch.compressor import Q8Compressor

        return {a: None if s is None else Q8Compressor(s.format, s.min_size, s.error_feedback, s.warmup_steps,
                                                        s.schedule, s.pipeline_elements)
                for a, s in settings_of(self).items()}

    def plan(self, device: Optional[torch.device] = None) -> AutoPlan:
        """The plan; a first call calibrates with tensors on `device` (default the CPU), the
        gradients' own, since a GPU's codec runs at another rate than the CPU's."""
        import horovod.torch as hvd

        probe = lambda: horovod_probe(self.compressors, device or torch.device("cpu"))  # noqa: E731
        return self.auto_state.ensure(probe, lambda s, label: hvd_agreement.agree(s, label), log_on_rank0(hvd.rank()))

    def compressor_for(self, name: str):
        """horovod_q8's compressor for a quantized format, Horovod's own for none and fp16."""
        import horovod.torch as hvd

        return self.compressors[name] or getattr(hvd.Compression, name)

    def _chosen(self, tensor: torch.Tensor):
        return self.compressor_for(self.plan(tensor.device).choose(tensor.numel()).name)

    def compress(self, tensor: torch.Tensor):
        import horovod.torch as hvd

        if tensor.is_sparse:
            raise TypeError("horovod_q8 compresses dense gradients; pass sparse_as_dense=True")
        if hvd.size() < 2 or not tensor.dtype.is_floating_point:
            comp = hvd.Compression.none
        else:
            hvd_agreement.agree(hvd_agreement.statement(self), "compressor", once=True)
            comp = self._chosen(tensor)
        wire, cast = horovod_plain(tensor) if comp is hvd.Compression.none else (tensor, None)
        out, ctx = comp.compress(wire)
        return out, (comp, ctx, cast)

    def decompress(self, tensor: torch.Tensor, ctx):
        comp, inner, cast = ctx
        out = comp.decompress(tensor, inner)
        return out if cast is None else out.to(cast)


def auto(allow: Sequence[str] = DEFAULT_ALLOW, *, min_size: int = 1024, **options) -> AutoCompressor:
    a = make_auto(allow, min_size, **options)
    return AutoCompressor(a.allow, a.min_size, a.options)
