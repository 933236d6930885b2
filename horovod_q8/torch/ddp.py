"""A DDP communication hook without Horovod: `model.register_comm_hook(state, ddp_hook)`.

    state = Q8HookState("q8", warmup_steps=100)
    model.register_comm_hook(state, ddp_hook)

DDP calls the hook once per gradient bucket, in bucket order on every rank, so the engine's
collectives (matched by call order) line up. Each bucket is reduced by the engine's schedule
over `DistTransport` and divided by N (DDP wants the average); every rank ends with the same
bits. The state keeps the residuals by the bucket's parameters (DDP rebuilds its buckets after
the first step, in another order), the step and warm-up, like PowerSGD's state.
"""
import hashlib
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from horovod_q8.collective import engine, policy
from horovod_q8.collective.auto import Auto, AutoState, make_auto
from horovod_q8.collective.setting import Setting
from horovod_q8.torch import dist_agreement
from horovod_q8.torch.auto import dist_probe, log_on_rank0, settings_of
from horovod_q8.torch.common import group_of, make_setting, seed_for
from horovod_q8.torch.dist import DistTransport
from horovod_q8.torch.state import TorchResiduals
from horovod_q8.torch.tensors import as_array, as_tensor, kernel_stream

# (start, end) element ranges of one bucket that share a layer group
Ranges = List[Tuple[int, int]]


class Q8HookState:
    """The state of `ddp_hook` for one DDP model.

    compression: a format name ("q8", "q4", "q4_threshold", ...) or a Setting, such as
    `horovod_q8.torch.compressor("q8", block_size=256)`; or "auto" (options allow=, min_size=
    and the formats' options), each bucket then as the format Auto chooses for its size. process_group: None for the default.
    warmup_steps: the first steps go as DDP's plain allreduce (PowerSGD's start_powerSGD_iter).
    min_size: buckets (or layer groups of one) with fewer elements go uncompressed.
    error_feedback: keep what quantization dropped and add it next step (None: threshold formats).
    Other options (block_size, rounding, seed, threshold, levels, schedule, pipeline_elements)
    are those of the format or Setting. Residuals are keyed by the bucket's parameters, in their
    order, and the layer group: `state_dict()` saves them with the step, per rank.
    """

    def __init__(self, compression: Union[str, Setting, Auto] = "q8", process_group=None, **options) -> None:
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be None (the default group) or a torch.distributed ProcessGroup, "
                            f"got {type(process_group).__name__} {process_group!r}")
        self.auto: Optional[Auto] = None
        if compression == "auto" or isinstance(compression, Auto):
            self.auto = compression if isinstance(compression, Auto) else make_auto(**options)
            self.auto_state = AutoState(Auto(self.auto.allow, self.auto.min_size, self.auto.options))
            self.settings = settings_of(self.auto)
            self.setting: Optional[Setting] = None
            self.warmup_steps = self.auto.warmup_steps
        else:
            self.setting = make_setting(compression, **options)
            self.warmup_steps = self.setting.warmup_steps
        self.process_group = process_group
        self.iter = 0
        self.residuals: Optional[TorchResiduals] = None
        self._transports: Dict[torch.device, DistTransport] = {}
        self._checked = False
        self._numbers: Dict[int, int] = {}  # id(parameter) -> its number, in the order the hook first sees them
        self._agreed_buckets: set = set()  # bucket keys every rank has stated

    def bucket_key(self, parameters: Sequence[torch.Tensor]) -> str:
        """A bucket's residual key: its parameters' numbers in order (first seen in the first step's
        buckets, which DDP builds alike on every rank and in every run of the model), so that a
        residual is only ever added back to the parameters it was left by."""
        numbers = ",".join(str(self._numbers.setdefault(id(p), len(self._numbers))) for p in parameters)
        return "p" + hashlib.sha1(numbers.encode()).hexdigest()[:12]

    def check_bucket(self, key: str, index: int, n: int, parameters: int) -> None:
        """A bucket's first time: every rank holds the same bucket at this index (ranks whose
        buckets differ, another bucket_cap_mb or model, would exchange mismatched sizes inside
        the process group and crash there, or wait)."""
        if key in self._agreed_buckets or dist.get_world_size(self.process_group) < 2:
            return
        dist_agreement.agree({"buckets": f"DDP bucket {index}: {n} elements in {parameters} parameters"},
                             self.process_group, "ddp_hook")
        self._agreed_buckets.add(key)

    def transport(self, device: torch.device) -> DistTransport:
        if device not in self._transports:
            self._transports[device] = DistTransport(self.process_group, device)
        return self._transports[device]

    def residual_store(self, device: torch.device) -> TorchResiduals:
        if self.residuals is None:
            self.residuals = TorchResiduals(device)
        elif self.residuals.device != device:  # loaded from a checkpoint before the first step
            self.residuals.to(device)
        return self.residuals

    def check_config(self) -> None:
        """Once, in bucket 0's hook: every rank has this hook with the same setting (dist_agreement:
        through the process group's store, bounded by HOROVOD_Q8_CHECK_TIMEOUT_S)."""
        if self._checked:
            return
        mine = dict(self.fingerprint())
        if self.warmup_steps:  # every rank leaves the warm-up on the same step (a state loaded on one rank only)
            mine["warmup_steps_left"] = max(self.warmup_steps - self.iter, 0)
        dist_agreement.agree(mine, self.process_group)
        self._checked = True

    def fingerprint(self) -> dict:
        return (self.auto or self.setting).fingerprint()

    def choose(self, n: int, device: torch.device) -> Tuple[str, Optional[Setting]]:
        """Auto: the format for a bucket of n elements and its Setting (None: none or fp16),
        calibrating at the first bucket (every rank together, on the buckets' device)."""
        group = self.process_group
        plan = self.auto_state.ensure(lambda: dist_probe(self._probe_send, group, device),
                                      lambda s, label: dist_agreement.agree(s, group, label),
                                      log_on_rank0(dist.get_rank(group)))
        name = plan.choose(n).name
        return name, self.settings[name]

    def _probe_send(self, name: str, t: torch.Tensor) -> None:
        """Calibration: one bucket's path as `name`, residuals and steps left untouched."""
        setting = self.settings.get(name)  # none times the link, allowed or not
        if setting is None:
            _plain_average(t, dist.get_world_size(self.process_group), self.process_group, half=name == "fp16")
            return
        x = t.reshape(-1)
        transport = self.transport(t.device)
        req = policy.request(setting, x.numel(), group_of(x), f"ddp.auto.calibration.{name}.{x.numel()}")
        with kernel_stream(t.device):
            engine.compressed_sum(transport, req, as_array(x), TorchResiduals(t.device),
                                  lambda k: seed_for(setting.format.seed, k, 0, transport.rank))

    def maybe_increase_iter(self, bucket) -> None:
        if bucket.is_last():
            self.iter += 1

    def state_dict(self) -> dict:
        out = {"iter": self.iter, "setting": self.fingerprint(),
               "residuals": None if self.residuals is None else self.residuals.state_dict()}
        if self.auto is not None:
            out["auto"] = self.auto_state.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        saved = state.get("setting")
        if self.setting is not None and isinstance(saved, dict) and saved.get("error_feedback", False) is None:
            saved = {**saved, "error_feedback": self.setting.format.uses_residual}  # saved before None was resolved
        if saved not in (None, self.fingerprint()):
            raise ValueError("horovod_q8: this checkpoint's hook state was saved with another "
                             "compression setting")
        self.iter = int(state["iter"])
        self._checked = False  # the ranks compare again, steps included
        if self.auto is not None and state.get("auto"):
            self.auto_state.load_state_dict(state["auto"])
        if state.get("residuals") is not None:
            self.residuals = TorchResiduals(self.residuals.device if self.residuals is not None else "cpu")
            self.residuals.load_state_dict(state["residuals"])


# Annotations evaluated (no `from __future__ import annotations`): DDP compares them as objects.
def ddp_hook(state: Q8HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's average over every rank, compressed."""
    if not isinstance(bucket, dist.GradBucket):  # FSDP calls its hooks with a gradient tensor
        raise TypeError("horovod_q8's ddp_hook is a DistributedDataParallel communication hook; it got a "
                        f"{type(bucket).__name__}, not a GradBucket (FSDP's hooks are not supported)")
    buffer = bucket.buffer()
    if buffer.is_sparse:
        raise ValueError("horovod_q8's ddp_hook compresses dense gradients and this bucket holds a sparse one "
                         "(an nn.Embedding or EmbeddingBag with sparse=True): build it with sparse=False")
    # raised here, an error reaches backward() as itself; through fut.set_exception torch wraps it
    # in "Unable to cast ... to Tensor"
    parameters = bucket.parameters()
    sizes = [g.numel() for g in bucket.gradients()]
    groups = [group_of(p) for p in parameters]
    key = state.bucket_key(parameters)
    state.check_bucket(key, bucket.index(), buffer.numel(), len(parameters))
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(average(state, buffer, key, layout(sizes, groups)))
    state.maybe_increase_iter(bucket)
    return fut


def layout(sizes: Sequence[int], groups: Sequence[str]) -> "OrderedDict[str, Ranges]":
    """The element ranges of each layer group, in the order groups first appear."""
    out: "OrderedDict[str, Ranges]" = OrderedDict()
    start = 0
    for n, g in zip(sizes, groups):
        ranges = out.setdefault(g, [])
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], start + n)
        else:
            ranges.append((start, start + n))
        start += n
    return out


def average(state: Q8HookState, flat: torch.Tensor, key: str,
            groups: Optional["OrderedDict[str, Ranges]"] = None) -> torch.Tensor:
    """`flat` (1-D, contiguous) replaced by its average over every rank of the state's group.

    groups: the element ranges of each layer group (one q4_threshold level set each); without
    it, the whole tensor is one group of its own rank. Formats without groups take it whole.
    """
    n_ranks = dist.get_world_size(state.process_group)
    if n_ranks > 1:
        state.check_config()
    if n_ranks == 1 or state.iter < state.warmup_steps:
        dist.all_reduce(flat, group=state.process_group)
        return flat.div_(n_ranks)
    setting, prefix = state.setting, f"ddp.{key}"
    if state.auto is not None:
        name, setting = state.choose(flat.numel(), flat.device)
        if setting is None:
            return _plain_average(flat, n_ranks, state.process_group, half=name == "fp16")
        prefix = f"ddp.{key}.{name}"
    if not setting.format.level_groups or not groups:
        whole = next(iter(groups)) if groups else group_of(flat)
        groups = OrderedDict([(whole, [(0, flat.numel())])])
    plain: List[Tuple[Ranges, torch.Tensor]] = []
    for g, ranges in groups.items():
        part = flat[ranges[0][0]:ranges[0][1]] if len(ranges) == 1 else torch.cat([flat[s:e] for s, e in ranges])
        if not policy.decide(setting, True, part.numel(), n_ranks, g).compress:
            plain.append((ranges, part))
            continue
        total = compressed_sum(state, part, f"{prefix}.{g}", g, setting)
        if len(ranges) == 1 and flat.dtype == torch.float32:
            torch.div(total, n_ranks, out=part)  # one pass: the average lands in the bucket
        else:
            _write_back(flat, ranges, total.div_(n_ranks))
    if plain:  # every uncompressed group in one plain allreduce
        joined = plain[0][1] if len(plain) == 1 else torch.cat([p for _, p in plain])
        dist.all_reduce(joined, group=state.process_group)
        joined.div_(n_ranks)
        offset = 0
        for ranges, p in plain:
            if joined is not p or len(ranges) > 1:  # else the allreduce ran in the bucket itself
                _write_back(flat, ranges, joined[offset: offset + p.numel()])
            offset += p.numel()
    return flat


def _plain_average(flat: torch.Tensor, n_ranks: int, group, half: bool) -> torch.Tensor:
    """DDP's own average, in float16 on the wire where `half` (as torch's fp16_compress_hook)."""
    if not half or flat.dtype != torch.float32:
        dist.all_reduce(flat, group=group)
        return flat.div_(n_ranks)
    wire = flat.to(torch.float16).div_(n_ranks)
    dist.all_reduce(wire, group=group)
    return flat.copy_(wire)


def compressed_sum(state: Q8HookState, part: torch.Tensor, key: str, group: str,
                   setting: Optional[Setting] = None) -> torch.Tensor:
    """The engine's float32 sum of `part` over every rank, in a buffer reused across steps."""
    setting = setting or state.setting
    device = part.device
    x = part if part.dtype == torch.float32 and part.is_contiguous() else part.float().contiguous()
    t = state.transport(device)
    req = policy.request(setting, x.numel(), group, key)
    step, rank, base = state.iter, t.rank, setting.format.seed
    with kernel_stream(device):
        out = engine.compressed_sum(t, req, as_array(x), state.residual_store(device),
                                    lambda k: seed_for(base, k, step, rank))
    return as_tensor(out)


def _write_back(flat: torch.Tensor, ranges: Ranges, values: torch.Tensor) -> None:
    offset = 0
    for s, e in ranges:
        flat[s:e].copy_(values[offset: offset + e - s])
        offset += e - s
