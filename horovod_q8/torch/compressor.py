"""Compressors for horovod.torch's `compression=` (`hvd.allreduce`, `hvd.DistributedOptimizer`).

compress(t) runs the first round of the engine's compressed sum (`hvd_transport`: nothing
waits there, so backward hooks in any order are safe) and hands Horovod a control tensor
[1, rank]. After Horovod reduces it, [0] is the factor its op (Sum/Average), prescale and
postscale applied, times N, and [1]/[0] is (N-1)/2 for Sum and Average only; decompress()
waits for the sum (second round) and scales it by that factor, so every op keeps its meaning.
Collectives are named after the tensor: `horovod_api` tells compress() the parameter's name
inside Horovod's optimizer and the `name=` of `hvd.allreduce`; unnamed calls are numbered in
call order, which every rank must then share (as Horovod's own unnamed allreduces).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import torch

from horovod_q8.collective import engine, policy
from horovod_q8.collective.setting import Setting, by_name
from horovod_q8.torch import generation, hvd_agreement
from horovod_q8.torch.common import ConfigMismatchError, group_of, horovod_plain, seed_for
from horovod_q8.torch.names import next_name
from horovod_q8.torch.state import TorchResiduals
from horovod_q8.torch.tensors import as_array, as_tensor, kernel_stream

_LOG = logging.getLogger("horovod_q8")
_UNNAMED = generation.Numbering()
_TRANSPORT: Dict[str, Any] = {}

__all__ = ["ConfigMismatchError", "Q8Compressor", "compressor", "factor_from_control"]


def _drop_transport() -> None:
    _TRANSPORT.clear()  # it holds the rank and the rank count, and collectives of the old generation


generation.on_new(_drop_transport)


def transport():
    """The process's Horovod transport (its pending second-round collectives are shared)."""
    if "t" not in _TRANSPORT:
        from horovod_q8.torch.hvd_transport import HorovodTorchTransport
        _TRANSPORT["t"] = HorovodTorchTransport()
    return _TRANSPORT["t"]


class PerTensorState:
    """Residuals and steps of the per-tensor path, keyed by collective name, one store per device."""

    def __init__(self) -> None:
        self.stores: Dict[str, TorchResiduals] = {}
        self.steps_generation: Optional[int] = None  # the generation whose ranks agreed on the steps

    def store(self, device: torch.device) -> TorchResiduals:
        key = str(device)
        if key not in self.stores:
            self.stores[key] = TorchResiduals(device)
        return self.stores[key]

    def agree_steps(self, device: torch.device) -> None:
        """Under elastic Horovod, at the first compress of each generation: every key's largest
        step count over the ranks, so that a rank that joined ends its warm-up with the others."""
        if self.steps_generation == generation.current():
            return
        self.steps_generation = generation.current()
        mine = {k: n for s in self.stores.values() for k, n in s.steps.items()}
        agreed = hvd_agreement.largest_steps(mine, "steps")
        for s in self.stores.values():
            s.steps.update({k: agreed[k] for k in s.steps})
        store = self.store(device)  # a key this rank has not met: on the device of this first call
        store.steps.update({k: n for k, n in agreed.items() if k not in mine})

    def state_dict(self) -> dict:
        return {k: s.state_dict() for k, s in self.stores.items()}

    def load_state_dict(self, state: dict) -> None:
        for k, s in state.items():
            self.store(torch.device(k)).load_state_dict(s)


@dataclass(frozen=True)
class Q8Compressor(Setting):
    """A `Setting` as a horovod.torch compressor; also a DDP hook's setting (`Q8HookState`).

    `state` holds the residuals and steps of the per-tensor path; horovod_q8's optimizer
    keeps its own. `fresh()` is the same setting with new state.
    """

    state: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.state is None:
            object.__setattr__(self, "state", PerTensorState())

    def fresh(self) -> "Q8Compressor":
        return dataclasses.replace(self, state=None)

    def compress(self, tensor: torch.Tensor):
        """Submit the compressed sum's first round; return the control tensor for Horovod."""
        import horovod.torch as hvd

        if tensor.is_sparse:
            raise TypeError("horovod_q8 compresses dense gradients; pass sparse_as_dense=True")
        size = hvd.size()
        if size > 1:
            check_same_config(self)
            if self.warmup_steps > 0 and generation.elastic():
                self.state.agree_steps(tensor.device)
        name = next_name()
        decision = policy.decide(self, tensor.dtype.is_floating_point, tensor.numel(), size, group_of(tensor))
        if not decision.compress:
            return horovod_plain(tensor)
        if name is None:  # no residuals: nothing ties this call to the next one of the same tensor
            store, step = None, _UNNAMED()
            key = f"q8.{self.name}.noname.{step}"
        else:
            store, key = self.state.store(tensor.device), f"q8.{self.name}.{name}"
            step = store.step(key)
        if step <= self.warmup_steps:
            return horovod_plain(tensor)  # Horovod's own allreduce, with its op
        flat = tensor.detach().reshape(-1)
        if flat.dtype != torch.float32 or not flat.is_contiguous():
            flat = flat.float().contiguous()
        req = policy.request(self, flat.numel(), group_of(tensor), key)
        t, base = transport(), self.format.seed
        with kernel_stream(tensor.device):
            result = engine.compressed_sum(t, req, as_array(flat), store,
                                           lambda k: seed_for(base, k, step, t.rank))
        control = torch.tensor([1.0, float(hvd.rank())], dtype=torch.float32, device=tensor.device)
        return control, (result, tensor.dtype, tensor.shape)

    def decompress(self, tensor: torch.Tensor, ctx):
        """The exact compressed sum, scaled by the factor Horovod's op applied to [1, rank]."""
        if ctx is None or isinstance(ctx, torch.dtype):  # sent plain (horovod_plain)
            return tensor if ctx is None else tensor.to(ctx)
        import horovod.torch as hvd
        from horovod_q8.torch.hvd_transport import value

        result, dtype, shape = ctx
        transport().flush()  # first: a refused op below must not leave this round half submitted
        factor = factor_from_control(tensor, hvd.size())
        with kernel_stream(tensor.device):
            total = as_tensor(value(result))
        return (total * factor).to(dtype).reshape(shape)

    def __repr__(self) -> str:
        return f"Q8Compressor({self.format.name})"


def factor_from_control(control: torch.Tensor, n_ranks: int) -> float:
    """The factor Horovod's op, prescale and postscale applied, from the reduced [1, rank]."""
    c0, c1 = (float(v) for v in control.detach().double().cpu())
    if c0 == 0.0:
        raise ValueError("horovod_q8: prescale_factor or postscale_factor is 0, which makes every "
                         "gradient 0; use a non-zero factor")
    if abs(c1 / c0 - (n_ranks - 1) / 2) > 1e-3 * max(1.0, n_ranks):
        raise ValueError("horovod_q8 compression supports op=Sum and op=Average only (Adasum, Min, "
                         "Max and Product cannot be computed from quantized codes)")
    return c0 / n_ranks


def check_same_config(comp: Setting) -> None:
    """Once per setting and process: every rank must use exactly the same settings."""
    hvd_agreement.agree(hvd_agreement.statement(comp), "compressor", once=True)


def compressor(name: str = "q8", **options):
    """A compressor for horovod.torch's `compression=`: "none" and "fp16" are Horovod's own;
    options as `collective.setting.by_name`."""
    made = by_name(name, **options)
    if made is None:
        import horovod.torch as hvd
        return getattr(hvd.Compression, name)
    return Q8Compressor(made[0], **made[1])
