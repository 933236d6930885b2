"""horovod_q8 for PyTorch: horovod.torch compressors and optimizer, and a DDP communication hook.

    import horovod.torch as hvd
    from horovod_q8.torch import Q8
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=Q8)

    from horovod_q8.torch import Q8HookState, ddp_hook      # torch.distributed, no Horovod
    model.register_comm_hook(Q8HookState("q8"), ddp_hook)

Importing this module needs torch only. Where horovod.torch is built, it also wraps Horovod's
optimizer factory and names tensors for compress() (`horovod_api`).
"""
import importlib.util
from pathlib import Path
from typing import Optional, Sequence

from horovod_q8.collective.auto import DEFAULT_ALLOW
from horovod_q8.formats import COMPRESSION_NAMES
from horovod_q8.torch import compressor as _fixed
from horovod_q8.torch.auto import AutoCompressor, auto
from horovod_q8.torch.common import ConfigMismatchError
from horovod_q8.torch.compressor import Q8Compressor
from horovod_q8.torch.ddp import Q8HookState, ddp_hook
from horovod_q8.torch.optimizer import DistributedOptimizer


def compressor(name: str = "q8", *, allow: Optional[Sequence[str]] = None, **options):
    """A compressor for horovod.torch's `compression=` by name: "auto" (each tensor's format chosen
    from the measured link and codec, among `allow`), "none" and "fp16" (Horovod's own), or a
    horovod_q8 format; options as `horovod_q8.collective.setting.by_name`."""
    if name == "auto":
        return auto(DEFAULT_ALLOW if allow is None else allow, **options)
    if allow is not None:
        raise TypeError("allow= is an option of compressor('auto') only")
    return _fixed.compressor(name, **options)


class _HorovodOwn:
    """Horovod's own compressor, looked up when used (horovod.torch may not be built)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj, cls):
        import horovod.torch as hvd
        return getattr(hvd.Compression, self.name)


class Compression:
    """Every compression by name, Horovod's `none` and `fp16` included."""

    none = _HorovodOwn("none")
    fp16 = _HorovodOwn("fp16")
    q8 = compressor("q8")
    q8_dynamic_tree = compressor("q8_dynamic_tree")
    q8_linear = compressor("q8_linear")
    q8_mantissa = compressor("q8_mantissa")
    q8_static_tree = compressor("q8_static_tree")
    q4 = compressor("q4")
    q4_threshold = compressor("q4_threshold")
    twobit = compressor("twobit")
    auto = compressor("auto")


Q8 = Compression.q8
Q4 = Compression.q4
Auto = Compression.auto


def horovod_torch_built() -> bool:
    """Is horovod.torch's extension there (looked up without importing it: a Horovod built
    without PyTorch prints a warning on import)?"""
    spec = importlib.util.find_spec("horovod")
    return spec is not None and any(any(Path(loc, "torch").glob("mpi_lib_v2*"))
                                    for loc in spec.submodule_search_locations or [])


def _install_horovod() -> bool:
    if not horovod_torch_built():  # the DDP hook still works
        return False
    from horovod_q8.torch import horovod_api
    return horovod_api.install()


HOROVOD = _install_horovod()

__all__ = ["Auto", "AutoCompressor", "COMPRESSION_NAMES", "Compression", "ConfigMismatchError",
           "DistributedOptimizer", "Q4", "Q8", "Q8Compressor", "Q8HookState", "compressor", "ddp_hook"]
