"""horovod.torch's private surface, fenced: the one place horovod_q8 reaches into it.

A compressor's compress(t) is not told t's name, and horovod_q8's collectives need a name
identical on every rank (ranks reach backward hooks in different orders). When Horovod is the
version we know (0.28, same signatures), `install()`:
- makes `hvd.DistributedOptimizer(opt, compression=<horovod_q8>)` horovod_q8's fused optimizer
  (`optimizer.DistributedOptimizer`: buckets, owned state); HOROVOD_Q8_FUSED=0 keeps Horovod's;
- names each tensor for compress() in Horovod's optimizer (its parameter name) and in
  `hvd.allreduce(t, name=...)` / `hvd.grouped_allreduce(ts, name=...)`;
- starts a new `generation` at each re-initialisation of `hvd.elastic.run` (its reset's init).
Where Horovod differs nothing is patched and a warning says so: unnamed compress() calls are
then numbered in call order, which is right for `hvd.allreduce` called in the same order on
every rank, not for Horovod's optimizer; use horovod_q8.torch.DistributedOptimizer there.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
from typing import Callable, Dict, Optional

from horovod_q8.options import NON_GLOBAL_PROCESS_SET
from horovod_q8.torch import generation, hvd_agreement
from horovod_q8.torch.common import check_op
from horovod_q8.torch.names import with_names

_LOG = logging.getLogger("horovod_q8")
_originals: Dict[str, Callable] = {}

KNOWN_VERSIONS = ("0.28.",)
KNOWN = {
    "DistributedOptimizer": ("optimizer", "named_parameters", "compression", "backward_passes_per_step",
                             "op", "gradient_predivide_factor", "num_groups", "groups", "sparse_as_dense",
                             "process_set"),
    "_DistributedOptimizer._allreduce_grad_async": ("self", "p"),
    "_DistributedOptimizer._grouped_allreduce_grad_async": ("self", "ps"),
    "allreduce": ("tensor", "average", "name", "compression", "op", "prescale_factor", "postscale_factor",
                  "process_set"),
    "grouped_allreduce": ("tensors", "average", "name", "compression", "op", "prescale_factor",
                          "postscale_factor", "process_set"),
    "elastic.init": ("args", "kwargs"),
}


def _targets() -> Dict[str, Callable]:
    import horovod.torch as hvd
    from horovod.torch import elastic as helastic
    from horovod.torch import optimizer as hopt

    if helastic._reset.__code__.co_names != ("shutdown", "init"):
        raise AttributeError("hvd.elastic.run's reset is not shutdown(); init()")
    return {"elastic.init": helastic.init,"DistributedOptimizer": hvd.DistributedOptimizer,
            "_DistributedOptimizer._allreduce_grad_async": hopt._DistributedOptimizer._allreduce_grad_async,
            "_DistributedOptimizer._grouped_allreduce_grad_async":
                hopt._DistributedOptimizer._grouped_allreduce_grad_async,
            "allreduce": hvd.allreduce, "grouped_allreduce": hvd.grouped_allreduce}


def fence_problem() -> Optional[str]:
    """Why the private surface cannot be used here, or None when it is the one we know."""
    import horovod

    version = getattr(horovod, "__version__", "?")
    if not version.startswith(KNOWN_VERSIONS):
        return f"Horovod {version} is not a version horovod_q8 knows ({', '.join(KNOWN_VERSIONS)}x)"
    try:
        targets = _originals or _targets()
    except (ImportError, AttributeError) as e:
        return f"horovod.torch lacks what horovod_q8 wraps ({e})"
    for key, params in KNOWN.items():
        got = tuple(inspect.signature(targets[key]).parameters)
        if got != params:
            return f"horovod.torch {key}{got} is not the signature we know"
    return None


def _named(optimizer, named_parameters) -> list:
    """(name, parameter) pairs as Horovod's optimizer names them."""
    if named_parameters is not None:
        return list(named_parameters)
    return [(f"allreduce.noname.{i}.{j}", p) for i, g in enumerate(optimizer.param_groups)
            for j, p in enumerate(g["params"])]


def _is_ours(compression) -> bool:
    """A horovod_q8 compressor or Auto: hvd.DistributedOptimizer then builds horovod_q8's."""
    from horovod_q8.collective.auto import AutoCompressorBase
    from horovod_q8.torch.compressor import Q8Compressor
    return isinstance(compression, (Q8Compressor, AutoCompressorBase))


def install() -> bool:
    """Wrap Horovod's functions once; False (with a warning) where Horovod differs."""
    if _originals:
        return True
    problem = fence_problem()
    if problem:
        _LOG.warning("horovod_q8: %s; hvd.DistributedOptimizer cannot name tensors for horovod_q8: "
                     "use horovod_q8.torch.DistributedOptimizer", problem)
        return False
    import horovod.torch as hvd
    from horovod.torch import elastic as helastic
    from horovod.torch import mpi_ops
    from horovod.torch import optimizer as hopt

    _originals.update(_targets())
    o = _originals

    @functools.wraps(o["DistributedOptimizer"])
    def distributed_optimizer(optimizer, named_parameters=None, compression=hvd.Compression.none, *args, **kwargs):
        op = kwargs.get("op", args[1] if len(args) > 1 else None)
        if _is_ours(compression):
            check_op(op)
        if _is_ours(compression) and os.environ.get("HOROVOD_Q8_FUSED", "1") != "0":
            from horovod_q8.torch.optimizer import from_horovod_arguments
            return from_horovod_arguments(optimizer, named_parameters, compression, *args, **kwargs)
        process_set = kwargs.get("process_set", args[6] if len(args) > 6 else None)
        refuse_process_set(compression, process_set)
        named = _named(optimizer, named_parameters)  # a generator is read once: pass the list on
        named_parameters = None if named_parameters is None else named
        # every rank, whatever it compresses, says so (under elastic Horovod: not at build time)
        if hvd_agreement.is_global(process_set) and not generation.elastic():
            if hvd.size() > 1:
                hvd_agreement.in_rank0_order(named)  # as the fused optimizer does (Horovod matches by name)
            hvd_agreement.agree(hvd_agreement.statement(compression, named, by_name=True), "DistributedOptimizer")
        return o["DistributedOptimizer"](optimizer, named_parameters, compression, *args, **kwargs)

    def allreduce_grad_async(self, p):
        return with_names([self._parameter_names.get(p)], o["_DistributedOptimizer._allreduce_grad_async"],
                          self, p)

    def grouped_allreduce_grad_async(self, ps):
        return with_names([self._parameter_names.get(p) for p in ps],
                          o["_DistributedOptimizer._grouped_allreduce_grad_async"], self, ps)

    def refuse_process_set(compression, process_set) -> None:
        if _is_ours(compression) and not hvd_agreement.is_global(process_set):
            raise ValueError(NON_GLOBAL_PROCESS_SET)

    def agree_once(compression, args, kwargs) -> None:
        if _is_ours(compression):  # before Horovod's own refusal
            check_op(kwargs.get("op", args[0] if args else None))
        process_set = kwargs.get("process_set", args[3] if len(args) > 3 else None)
        refuse_process_set(compression, process_set)
        if hvd_agreement.is_global(process_set):
            hvd_agreement.agree(hvd_agreement.statement(compression), "allreduce", once=True)

    @functools.wraps(o["allreduce"])
    def allreduce(tensor, average=None, name=None, compression=hvd.Compression.none, *args, **kwargs):
        agree_once(compression, args, kwargs)
        return with_names([name], o["allreduce"], tensor, average, name, compression, *args, **kwargs)

    @functools.wraps(o["grouped_allreduce"])
    def grouped_allreduce(tensors, average=None, name=None, compression=hvd.Compression.none, *args, **kwargs):
        agree_once(compression, args, kwargs)
        names = [None if name is None else f"{name}.{i}" for i in range(len(tensors))]
        return with_names(names, o["grouped_allreduce"], tensors, average, name, compression, *args, **kwargs)

    @functools.wraps(o["elastic.init"])
    def init_new_generation(*args, **kwargs):
        o["elastic.init"](*args, **kwargs)
        generation.advance()

    hvd.DistributedOptimizer = hopt.DistributedOptimizer = distributed_optimizer
    helastic.init = init_new_generation  # what hvd.elastic.run's reset calls after shutdown()
    hopt._DistributedOptimizer._allreduce_grad_async = allreduce_grad_async
    hopt._DistributedOptimizer._grouped_allreduce_grad_async = grouped_allreduce_grad_async
    hvd.allreduce = mpi_ops.allreduce = allreduce
    hvd.grouped_allreduce = mpi_ops.grouped_allreduce = grouped_allreduce
    return True


def installed() -> bool:
    return bool(_originals)
