"""The fast path for horovod.torch: gradients fused into buckets, one compressed sum per bucket.

    opt = horovod_q8.torch.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                                compression=Q8)

(`hvd.DistributedOptimizer(..., compression=Q8)` builds the same once horovod_q8.torch is
imported.) Backward hooks start a bucket's first round as soon as all its gradients are
there, in whatever order this rank gets there (`hvd_transport`: nothing waits); `synchronize()`
starts the buckets no hook started, in bucket order, then the second round, and writes the
averages back. The residuals and steps live in this optimizer and in its `state_dict()`.
"""
from __future__ import annotations

import contextlib
import itertools
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from horovod_q8.collective import bucket_parts, engine, policy
from horovod_q8.collective.auto import AutoCompressorBase
from horovod_q8.options import NON_GLOBAL_PROCESS_SET_PART, UNSUPPORTED_OP
from horovod_q8.torch import generation, hvd_agreement
from horovod_q8.torch.common import plain_dtype, seed_for
from horovod_q8.torch.compressor import Q8Compressor
from horovod_q8.torch.state import TorchResiduals
from horovod_q8.torch.tensors import TensorBuffers, as_array, as_tensor, kernel_stream

DEFAULT_FUSION_BYTES = 64 * 1024 * 1024
STATE_KEY = "horovod_q8"
ZERO_GRAD_RACE = ("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                  "optimizer.synchronize(): the gradients being reduced were dropped. Call zero_grad() "
                  "before the backward pass or after step()")
_OPTIMIZERS = itertools.count()  # built in the same order on every rank: names their collectives


class Bucket:
    """Gradients reduced together: parameters (one device), their shapes, the name of its
    collectives (`key`, unique in the process) and of its state (`slot`, stable across runs)."""

    def __init__(self, params: List[torch.nn.Parameter], index: int, key: str, slot: str) -> None:
        self.params, self.index, self.key, self.slot = params, index, key, slot
        self.shapes = [tuple(p.shape) for p in params]
        self.n = sum(p.numel() for p in params)
        self.ready = 0
        # ("q8", deferred sum) or ("plain", handle, (Horovod's compressor, its context))
        self.launched: Optional[tuple] = None
        self.starts: Optional[List[int]] = None  # where each gradient lies in the sum, when padded (bucket_parts)

    def group(self, setting) -> str:
        """The layer group it is quantized in, under a horovod_q8 setting."""
        return policy.bucket_group(setting, self.shapes, [0])


class Reducer:
    """The buckets of one optimizer and the round-based schedule over them."""

    def __init__(self, named: Sequence[Tuple[str, torch.nn.Parameter]], compression,
                 op, gradient_predivide_factor: float, fusion_bytes: int, sparse_as_dense: bool) -> None:
        import horovod.torch as hvd

        if op not in (hvd.Average, hvd.Sum):  # resolved by DistributedOptimizer: None never comes here
            raise ValueError(UNSUPPORTED_OP)
        if gradient_predivide_factor != 1.0 and op != hvd.Average:
            raise ValueError("gradient_predivide_factor is supported with op=Average only")
        if not gradient_predivide_factor > 0:
            raise ValueError(f"gradient_predivide_factor must be > 0, got {gradient_predivide_factor}")
        self.hvd, self.setting, self.sparse_as_dense = hvd, compression, sparse_as_dense
        self.prefix = f"q8.opt{next(_OPTIMIZERS)}"
        self.average = op == hvd.Average
        self.fusion_bytes, self.named = fusion_bytes, list(named)
        self.stores: Dict[str, TorchResiduals] = {}
        self.transports: Dict[str, object] = {}  # HorovodTorchTransport by device
        # this optimizer's round-2 allgathers, submitted by its own finish() only: another
        # optimizer's may wait on alltoalls that other ranks start only in that one's step
        self.pending: list = []
        self.buckets: List[Bucket] = []
        self.bucket_of: Dict[torch.nn.Parameter, Bucket] = {}
        self.auto = isinstance(compression, AutoCompressorBase)
        self.chosen: Optional[tuple] = None  # Auto: (its plan, each bucket's compressor under it)
        self.warmup = compression.warmup_steps  # a fixed setting's, or Auto's quantized formats'
        self.steps_agreed = False  # see agree_steps
        by_group = compression.level_groups if self.auto else bool(compression.format.level_groups)
        if hvd.size() > 1 and not generation.elastic():
            self.named = hvd_agreement.in_rank0_order(self.named)
        for device, members in _by_device(self.named):
            shapes = [tuple(p.shape) for _, p in members]
            plan = policy.plan_buckets(shapes, fusion_bytes, 4, by_group)
            for idx in plan:
                k = len(self.buckets)
                b = Bucket([members[i][1] for i in idx], k, f"{self.prefix}.b{k}", f"b{k}")
                self.buckets.append(b)
                for p in b.params:
                    self.bucket_of[p] = b
        self.plan_generation: Optional[int] = None  # the generation whose ranks agreed on the buckets
        if not generation.elastic():  # elastic: a joining rank builds while the others synchronise
            self.agree_plan()
        generation.on_new(self.new_generation)

    def agree_plan(self) -> None:
        """Every rank's compression, parameters and buckets must be the same (ConfigMismatchError)."""
        self.plan_generation = generation.current()
        if self.hvd.size() > 1:
            buckets = policy.plan_statement(self.fusion_bytes, [b.n for b in self.buckets])
            hvd_agreement.agree(hvd_agreement.statement(self.setting, self.named, **buckets), "DistributedOptimizer")

    def new_generation(self) -> None:
        """Elastic Horovod re-initialised (ranks came or went): the transports, the buckets in
        flight and Auto's choice belong to the old ranks; the plan and
        the step counts are agreed again at this generation's first launch."""
        self.transports.clear()
        self.pending.clear()
        for b in self.buckets:
            b.launched, b.ready, b.starts = None, 0, None
        self.steps_agreed = False
        self.chosen = None  # Auto measures again (torch.auto)

    @property
    def scale(self) -> float:
        """The factor of the op over this generation's ranks (predivide's pre * post is 1)."""
        return 1.0 / self.hvd.size() if self.average else 1.0

    def store(self, device: torch.device) -> TorchResiduals:
        if str(device) not in self.stores:
            self.stores[str(device)] = TorchResiduals(device)
        return self.stores[str(device)]

    def transport(self, device: torch.device):
        """This optimizer's transport for one device: persistent buffers (`finish` copies every
        result out before the next step), its pending allgathers in `self.pending` (imported
        here: horovod_q8.torch loads without Horovod)."""
        from horovod_q8.torch.hvd_transport import HorovodTorchTransport

        if str(device) not in self.transports:
            self.transports[str(device)] = HorovodTorchTransport(TensorBuffers(device), self.pending)
        return self.transports[str(device)]

    def grad_ready(self, p: torch.nn.Parameter) -> None:
        """A hook's call: launch p's bucket once every gradient in it is final."""
        b = self.bucket_of[p]
        b.ready += 1
        if b.ready == len(b.params) and b.launched is None:
            self.launch(b)

    def compressor_of(self, b: Bucket):
        """The bucket's compressor: the fixed one, or what Auto chose for it (Horovod's own for
        none and fp16). Auto chooses for every bucket at once, at the first launch after it has
        no plan (the first step, or `recalibrate()` on every rank), which calibrates on every
        rank together: no collective of this optimizer is then in flight."""
        if not self.auto:
            return self.setting
        plan = self.setting.auto_state.plan
        if self.chosen is None or plan is None or plan is not self.chosen[0]:
            from horovod_q8.torch.auto import log_on_rank0

            self.setting.plan(self.buckets[0].params[0].device)  # calibrates on the gradients' device
            comps = self.setting.chosen_for_step([x.n for x in self.buckets], self.prefix,
                                                 log_on_rank0(self.hvd.rank()))
            self.chosen = (self.setting.auto_state.plan, comps)
        return self.chosen[1][b.index]

    def agree_steps(self) -> None:
        """Where the first steps go uncompressed (warm-up), every rank must count the same steps,
        or one rank would send a bucket as codes and another as floats, each waiting for the
        other's collective. Ranks differ after a resume as in Horovod's examples (rank 0 loads
        the checkpoint, `hvd.broadcast_optimizer_state` does not carry horovod_q8's state): at
        the first launch after it is built or loaded, this optimizer takes every slot's largest
        count over the ranks (one allgather; every rank launches a first bucket)."""
        self.steps_agreed = True
        if self.warmup <= 0 or self.hvd.size() < 2:
            return
        mine = {slot: n for s in self.stores.values() for slot, n in s.steps.items()}
        device_of = {b.slot: b.params[0].device for b in self.buckets}
        for theirs in self.hvd.allgather_object(mine, name=f"{self.prefix}.steps"):
            for slot, n in theirs.items():
                device = device_of.get(slot.split(".")[0])
                if device is not None:  # (a slot of a checkpoint of other buckets starts again)
                    store = self.store(device)
                    store.steps[slot] = max(store.steps.get(slot, 0), int(n))

    def launch(self, b: Bucket) -> None:
        """Round 1 for one bucket: encode and submit, or a plain (named) allreduce."""
        if self.plan_generation != generation.current():
            self.agree_plan()
        if not self.steps_agreed:
            self.agree_steps()
        device = b.params[0].device
        store = self.store(device)
        comp = self.compressor_of(b)
        b.starts = None
        if not isinstance(comp, Q8Compressor):  # Auto chose Horovod's own none or fp16
            self._launch_plain(b, comp)
            return
        slot = f"{b.slot}.{comp.name}" if self.auto else b.slot  # residuals and steps per format
        step = store.step(slot)
        group = b.group(comp)
        decision = policy.decide(comp, True, b.n, self.hvd.size(), group)
        if not decision.compress or step <= comp.warmup_steps:
            self._launch_plain(b, self.hvd.Compression.none)
            return
        grads = self._grads(b, torch.float32)
        t, base = self.transport(device), comp.format.seed
        req = policy.request(comp, b.n, group, b.key)
        sizes = [g.numel() for g in grads]
        slotted = bucket_parts.slotted_request(req, sizes)
        if slotted is not None:
            # the gradients as they lie, each in its slot: the encode reads them in place (bucket_parts)
            parts = bucket_parts.in_slots(grads, req.fmt, torch.cat)
            x = bucket_parts.Parts([as_array(a) for a in parts.arrays], parts.slots)
            req = slotted
            b.starts = bucket_parts.member_starts(sizes, req.fmt)
        else:
            x = as_array(torch.cat(grads) if len(grads) > 1 else grads[0])
        with kernel_stream(device):
            b.launched = ("q8", engine.compressed_sum(t, req, x, _Slots(store, b.key, slot),
                                                      lambda k: seed_for(base, k, step, t.rank), scale=self.scale))

    def _launch_plain(self, b: Bucket, comp) -> None:
        """The bucket's sum through Horovod's allreduce, compressed by Horovod's `comp` (none, fp16),
        in the gradients' own dtype as Horovod's optimizer sums them (a bucket holds one dtype)."""
        grads = self._grads(b, plain_dtype(b.params[0].dtype))
        flat = grads[0] if len(grads) == 1 else torch.cat(grads)
        sent, ctx = comp.compress(flat)
        b.launched = ("plain", self.hvd.allreduce_async(sent, op=self.hvd.Sum, name=f"{b.key}.plain"), (comp, ctx))

    def _grads(self, b: Bucket, dtype: torch.dtype) -> List[torch.Tensor]:
        """The bucket's gradients as 1-D contiguous tensors of `dtype` (the gradients themselves where they are)."""
        grads = []
        for p in b.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)  # every rank sends every bucket
            g = p.grad
            if g.is_sparse:
                if not self.sparse_as_dense:
                    raise TypeError("horovod_q8 compresses dense gradients; pass sparse_as_dense=True")
                g = g.to_dense()
            grads.append(g.detach().reshape(-1).to(dtype).contiguous())
        return grads

    def finish(self) -> None:
        """Launch what no hook launched (bucket order), round 2, and write the averages back."""
        from horovod_q8.torch.hvd_transport import flush_pending, value

        for b in self.buckets:
            if b.launched is None:
                self.launch(b)
        flush_pending(self.pending)
        for b in self.buckets:
            kind, pending = b.launched[:2]
            if kind == "plain":
                comp, ctx = b.launched[2]
                total = self.hvd.synchronize(pending)
                total = comp.decompress(total, ctx)
                scale = self.scale
                total = total.mul_(scale) if scale != 1.0 else total
            else:
                with kernel_stream(b.params[0].device):
                    total = as_tensor(value(pending))  # the engine's last step applied the scale
            starts = b.starts or list(itertools.accumulate([p.numel() for p in b.params[:-1]], initial=0))
            for p, offset in zip(b.params, starts):
                if p.grad is None:
                    raise AssertionError(ZERO_GRAD_RACE)
                g = p.grad if not p.grad.is_sparse else None
                part = total[offset: offset + p.numel()].view(p.shape)
                if g is None:
                    p.grad = part.to(p.dtype).to_sparse()
                else:
                    g.copy_(part)
            b.launched, b.ready = None, 0

    def state_dict(self) -> dict:
        state = {"residuals": {k: s.state_dict() for k, s in self.stores.items()}}
        if self.auto:
            state["auto"] = self.setting.state_dict()  # the calibration: a resumed run chooses the same
        return state

    def load_state_dict(self, state: dict) -> None:
        saved = state.get("residuals", {})
        ours = sorted({str(b.params[0].device) for b in self.buckets})
        if set(saved) <= set(ours):
            where = {k: k for k in saved}
        elif len(saved) == 1 and len(ours) == 1:  # saved on another device (cuda:0 loaded on cuda:1)
            where = {k: ours[0] for k in saved}
        else:
            raise ValueError(f"horovod_q8: this optimizer state was saved for parameters on {sorted(saved)}, "
                             f"but this optimizer's parameters are on {ours}; load it where the parameters "
                             "are on the same devices")
        for k, s in saved.items():
            self.store(torch.device(where[k])).load_state_dict(s)
        self.steps_agreed = False
        if self.auto and state.get("auto") is not None:
            self.setting.load_state_dict(state["auto"])
            self.chosen = None


class _Slots:
    """The engine names residuals after the bucket's collectives; the store keeps them under
    the bucket's slot, so that a checkpoint loads into another optimizer instance."""

    def __init__(self, store: TorchResiduals, key: str, slot: str) -> None:
        self.store, self.key, self.slot = store, key, slot

    def residual(self, key: str, n: int):
        return self.store.residual(self.slot + key[len(self.key):], n)


def _by_device(named) -> List[Tuple[torch.device, list]]:
    """The parameters by device and dtype, in order: a bucket holds one of each, so that its
    plain sum keeps the dtype (float64 gradients summed in float64, as Horovod sums them)."""
    out: Dict[Tuple[torch.device, torch.dtype], list] = {}
    for name, p in named:
        out.setdefault((p.device, p.dtype), []).append((name, p))
    return [(device, members) for (device, _), members in out.items()]


class _Q8DistributedOptimizer(torch.optim.Optimizer):
    """Methods mixed into the wrapped optimizer's own class (as Horovod's wrapper does)."""

    def __init__(self, params, named_parameters, compression: Q8Compressor, backward_passes_per_step: int,
                 op, gradient_predivide_factor: float, fusion_bytes: int, sparse_as_dense: bool) -> None:
        super(self.__class__, self).__init__(params)
        import horovod.torch as hvd

        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is None:
            named = [(f"param.{i}", p) for i, p in enumerate(all_params)]
        else:
            named = list(named_parameters)
            if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
                raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                                 "produced by model.named_parameters()")
            missing = {id(p) for p in all_params} - {id(p) for _, p in named}
            if missing:
                raise ValueError("named_parameters was given, but one or more of the optimizer's "
                                 "parameters is not named in it")
            in_opt = {id(p) for p in all_params}
            named = [(n, p) for n, p in named if id(p) in in_opt]
        if len({n for n, _ in named}) != len(named):
            raise ValueError("parameter names in named_parameters must be unique")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        named = [(n, p) for n, p in named if p.requires_grad]
        complex_ = [n for n, p in named if p.is_complex()]
        if complex_:
            raise TypeError(f"horovod_q8 reduces real floating-point gradients; {complex_[:3]} are complex "
                            "(Horovod does not support complex tensors either)")
        self.backward_passes_per_step = backward_passes_per_step
        self._q8 = Reducer(named, compression, op, gradient_predivide_factor, fusion_bytes, sparse_as_dense)
        self._passes = {p: 0 for _, p in named}
        self._synchronized = False
        self._should_synchronize = True
        self._grad_accs = []
        if hvd.size() > 1:
            for _, p in named:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._make_hook(p))
                self._grad_accs.append(acc)

    def _make_hook(self, p):
        def hook(*_):
            self._passes[p] += 1
            if self._passes[p] > self.backward_passes_per_step:
                raise AssertionError("gradients were computed more than backward_passes_per_step times "
                                     "before step(); increase backward_passes_per_step")
            if self._passes[p] == self.backward_passes_per_step:
                self._q8.grad_ready(p)
        return hook

    def zero_grad(self, *args, **kwargs):
        if any(b.launched is not None for b in self._q8.buckets):
            raise AssertionError(ZERO_GRAD_RACE)
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes: int) -> None:
        if passes < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        self.backward_passes_per_step = passes

    def synchronize(self) -> None:
        import horovod.torch as hvd

        if hvd.size() > 1:
            self._q8.finish()
        for p in self._passes:
            self._passes[p] = 0
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(): the gradients are reduced twice")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def state_dict(self) -> dict:
        state = super(self.__class__, self).state_dict()
        state[STATE_KEY] = self._q8.state_dict()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        mine = state_dict.pop(STATE_KEY, None)
        super(self.__class__, self).load_state_dict(state_dict)
        if mine is not None:
            self._q8.load_state_dict(mine)


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters=None,
                         compression: Optional[Q8Compressor] = None, backward_passes_per_step: int = 1,
                         op=None, gradient_predivide_factor: float = 1.0,
                         fusion_bytes: int = DEFAULT_FUSION_BYTES, sparse_as_dense: bool = False):
    """horovod.torch's DistributedOptimizer arguments (no groups, global process set), gradients in
    buckets of up to fusion_bytes through horovod_q8's compressed sum. A fresh state each."""
    import horovod.torch as hvd

    if compression is None:
        from horovod_q8.torch.compressor import compressor
        compression = compressor("q8")
    if not isinstance(compression, (Q8Compressor, AutoCompressorBase)):
        raise TypeError(f"compression must be a horovod_q8 compressor or Auto, got {compression!r}; "
                        "use hvd.DistributedOptimizer for Horovod's own")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_Q8DistributedOptimizer.__dict__))
    # Horovod's broadcast_optimizer_state knows its distributed optimizers by this module: for them
    # it initialises an empty state with the wrapped optimizer's own step, which reduces nothing.
    # Any other class's step() would run this optimizer's collectives on the ranks whose state is
    # empty alone (rank 0 loaded a checkpoint), and they would wait for rank 0 forever.
    import horovod.torch.optimizer as horovod_optimizer
    cls.__module__ = horovod_optimizer.__name__
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               hvd.Average if op is None else op, gradient_predivide_factor, fusion_bytes, sparse_as_dense)


def from_horovod_arguments(optimizer, named_parameters, compression, backward_passes_per_step=1, op=None,
                           gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                           process_set=None):
    """`hvd.DistributedOptimizer`'s signature, for a horovod_q8 compressor (horovod_api)."""
    import horovod.torch as hvd

    refused = []
    if num_groups or groups is not None:
        refused.append("groups/num_groups (horovod_q8 fuses gradients into its own buckets; drop them "
                       "or use horovod_q8.torch.DistributedOptimizer(fusion_bytes=...))")
    if process_set is not None and process_set is not hvd.global_process_set:
        refused.append(NON_GLOBAL_PROCESS_SET_PART)
    if refused:
        raise ValueError("horovod_q8 compression cannot honour " + "; ".join(refused))
    return DistributedOptimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                                op, gradient_predivide_factor, sparse_as_dense=sparse_as_dense)
