"""The framework checks of `horovod-q8 doctor`: TensorFlow, Horovod and its extensions, torch
and its distributed backends, the DDP hook, CuPy. Each says OK, FIX (installed but broken or
half installed) or SKIP (not installed, and what it is only needed for)."""
from __future__ import annotations

import importlib
import importlib.util
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from horovod_q8 import cuda_version

OK, FIX, SKIP = "OK", "FIX", "SKIP"
Check = Tuple[str, str]  # (status, message)
TESTED_TORCH = "CI runs torch 2.0.1 (with Horovod 0.28.1) and torch 2.11"
# Horovod's compiled extension per framework, looked up without importing it.
HOROVOD_EXTENSIONS = {"tensorflow": "tensorflow/mpi_lib*", "torch": "torch/mpi_lib_v2*"}


@dataclass
class Module:
    """An optional module: state is "missing", "ok" or "broken" (installed, does not import)."""

    state: str
    module: Any = None
    error: str = ""


def load(name: str) -> Module:
    """Import `name` if it is installed; never raises."""
    try:
        if importlib.util.find_spec(name) is None:
            return Module("missing")
        return Module("ok", importlib.import_module(name))
    except Exception as e:
        return Module("broken", error=f"{type(e).__name__}: {e}")


def version(module: Any) -> str:
    return str(getattr(module, "__version__", "?"))


def horovod_built(framework: str) -> bool:
    """Whether Horovod's extension for `framework` was compiled (its library file is there)."""
    spec = importlib.util.find_spec("horovod")
    return spec is not None and any(any(Path(loc).glob(HOROVOD_EXTENSIONS[framework]))
                                    for loc in spec.submodule_search_locations or [])


def tensorflow(tf: Module, hvd: Module) -> Check:
    if tf.state == "missing":
        return SKIP, "not installed (only needed for the TensorFlow + Horovod path: pip install horovod_q8[tf])"
    if tf.state == "broken":
        return FIX, f"TensorFlow is installed but does not import ({tf.error}); reinstall tensorflow-cpu==2.15.1"
    keras = load("keras")
    keras_version = version(keras.module) if keras.state == "ok" else "?"
    line = f"TensorFlow {version(tf.module)}, Keras {keras_version}"
    if keras_version.startswith("2."):
        return OK, line
    why = "Horovod 0.28.1 needs Keras 2: TF <= 2.15 (pip install tensorflow-cpu==2.15.1)"
    return (FIX if hvd.state != "missing" else SKIP), f"{line}; {why}"


def horovod(hvd: Module, frameworks: Dict[str, Module]) -> Check:
    """Horovod as a whole: FIX when it has no extension for any framework installed here."""
    if hvd.state == "missing":
        return SKIP, ("not installed (only needed for the TensorFlow + Horovod and horovod.torch paths; "
                      "the DDP hook needs no Horovod)")
    if hvd.state == "broken":
        return FIX, f"Horovod is installed but does not import ({hvd.error}); run scripts/setup.sh"
    built = [fw for fw in HOROVOD_EXTENSIONS if horovod_built(fw)]
    usable = [fw for fw in built if frameworks[fw].state == "ok"]
    line = f"Horovod {version(hvd.module)}, extensions built: {', '.join(built) or 'none'}"
    if not usable:
        have = [fw for fw, m in frameworks.items() if m.state == "ok"] or ["none"]
        return FIX, (f"{line}, frameworks installed: {', '.join(have)}: Horovod is half installed; rebuild it "
                     "with HOROVOD_WITH_TENSORFLOW=1 or HOROVOD_WITH_PYTORCH=1 (scripts/setup.sh), or "
                     "uninstall it (the DDP hook needs no Horovod)")
    return OK, line


def horovod_extension(framework: str, hvd: Module, fw: Module) -> Check:
    """horovod.tensorflow or horovod.torch: built for the installed framework, and loading."""
    name, label = f"horovod.{framework}", {"tensorflow": "TensorFlow", "torch": "torch"}[framework]
    for what, module in (("Horovod", hvd), (label, fw)):
        if module.state != "ok":
            why = "not installed" if module.state == "missing" else "does not import (above)"
            return SKIP, f"{what} {why} (only needed for {name})"
    if not horovod_built(framework):
        how = "HOROVOD_WITH_PYTORCH=1, torch <= 2.0.1 (docs/torch.md)" if framework == "torch" else \
            "HOROVOD_WITH_TENSORFLOW=1"
        return SKIP, f"Horovod was built without {label} (only needed for {name}: rebuild with {how})"
    ext = load(name)
    if ext.state != "ok":
        return FIX, (f"{name} is built but does not load ({ext.error}); rebuild Horovod against the "
                     f"installed {label} {version(fw.module)}")
    mod = ext.module
    controllers = [n for n, f in (("Gloo", mod.gloo_built), ("MPI", mod.mpi_built), ("NCCL", mod.nccl_built)) if f()]
    if not controllers:
        return FIX, f"{name} loads but Horovod was built with no controller (Gloo or MPI); rebuild it"
    return OK, (f"{name} loads: Horovod {version(load('horovod').module)} built with {', '.join(controllers)}"
                + ("" if mod.nccl_built() else " (no NCCL: GPU clusters need HOROVOD_GPU_OPERATIONS=NCCL)"))


def check_build(hvd: Module) -> Check:
    if hvd.state != "ok":
        return SKIP, "Horovod not installed (horovodrun is only needed with Horovod)"
    exe = Path(sys.executable).parent / "horovodrun"
    found = str(exe) if exe.exists() else shutil.which("horovodrun")
    if not found:
        return FIX, "horovodrun not found on PATH (it comes with Horovod: reinstall it)"
    out = subprocess.run([found, "--check-build"], capture_output=True, text=True, timeout=120)
    ops = [line.strip(" [X]") for line in out.stdout.splitlines() if "[X]" in line]
    return (OK if out.returncode == 0 else FIX), \
        f"horovodrun --check-build: frameworks, controllers, tensor ops: {', '.join(ops)}"


def torch_check(torch: Module) -> Check:
    """torch's version, CUDA and distributed backends."""
    if torch.state == "missing":
        return SKIP, "not installed (only needed for the DDP hook and horovod.torch: pip install torch)"
    if torch.state == "broken":
        return FIX, f"torch is installed but does not import ({torch.error}); reinstall torch"
    t = torch.module
    line = f"torch {t.__version__} ({'CUDA ' + t.version.cuda if t.version.cuda else 'CPU only'})"
    dist = getattr(t, "distributed", None)
    if dist is None or not dist.is_available():
        return FIX, f"{line} was built without torch.distributed, which the DDP hook and horovod.torch need; " \
                    "install PyPI's torch"
    backends = {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available()}
    have = [b for b, ok in backends.items() if ok]
    if not have:
        return FIX, f"{line}: torch.distributed has no backend (gloo, nccl, mpi); install PyPI's torch"
    line += f", torch.distributed backends: {', '.join(have)}"
    line += f" (not: {', '.join(b for b, ok in backends.items() if not ok)})" if len(have) < len(backends) else ""
    if t.cuda.is_available() and not backends["nccl"]:
        line += "; GPUs here but no NCCL: the hook on CUDA tensors needs it"
    major_minor = cuda_version.parse(t.__version__) or (0, 0)
    return OK, line + ("" if major_minor >= (2, 0) else f"; older than 2.0, untested ({TESTED_TORCH})")


def ddp_hook(torch_status: str) -> Check:
    """One real DDP step with ddp_hook on a 1-rank Gloo group, in a subprocess."""
    if torch_status != OK:
        return SKIP, "needs a working torch (above)"
    try:
        out = subprocess.run([sys.executable, "-m", "horovod_q8.ddp_probe"], capture_output=True, text=True,
                             timeout=180)
    except subprocess.TimeoutExpired:
        return FIX, "a 1-rank Gloo DDP step with ddp_hook did not finish in 180 s"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return FIX, f"a 1-rank Gloo DDP step with ddp_hook failed: {last}"
    return OK, out.stdout.strip().splitlines()[-1]


def cupy(cp: Module) -> Check:
    """CuPy with a GPU, or which CuPy wheel this host's CUDA wants."""
    hint = cuda_version.cupy_hint(cuda_version.found())
    if cp.state == "missing":
        return SKIP, f"not installed (only needed for GPU tensors; the CPU kernels are used): {hint}"
    if cp.state == "broken":
        return FIX, f"CuPy is installed but does not import ({cp.error}); {hint}"
    wheel = installed_cupy_wheel()
    try:
        n = cp.module.cuda.runtime.getDeviceCount()
        error = ""
    except Exception as e:
        n, error = 0, f"{type(e).__name__}: {e}"
    if n > 0:
        name = cp.module.cuda.runtime.getDeviceProperties(0)["name"].decode()
        return OK, f"CuPy {version(cp.module)} ({wheel}), {n} GPU(s): {name}"
    line = f"CuPy {version(cp.module)} ({wheel}) sees no GPU" + (f" ({error})" if error else "")
    if cuda_version.driver() is None:
        return SKIP, f"{line}: no NVIDIA driver here, the CPU kernels are used (only needed on GPU hosts; {hint})"
    return FIX, f"{line} although an NVIDIA driver is here: {hint}"


def installed_cupy_wheel() -> str:
    """The installed CuPy distribution's name (cupy-cuda12x, cupy-cuda13x, cupy), or '?'."""
    from importlib import metadata

    names = sorted({(d.metadata["Name"] or "").lower() for d in metadata.distributions()
                    if (d.metadata["Name"] or "").lower().startswith("cupy")})
    return ", ".join(names) or "?"


def framework_checks() -> List[Tuple[str, Check]]:
    """(name, check) per framework line, in report order."""
    tf, hvd, torch, cp = load("tensorflow"), load("horovod"), load("torch"), load("cupy")
    frameworks = {"tensorflow": tf, "torch": torch}
    torch_line = torch_check(torch)
    return [("tensorflow", tensorflow(tf, hvd)), ("horovod", horovod(hvd, frameworks)),
            ("hvd-tensorflow", horovod_extension("tensorflow", hvd, tf)), ("check-build", check_build(hvd)),
            ("torch", torch_line), ("ddp-hook", ddp_hook(torch_line[0])),
            ("hvd-torch", horovod_extension("torch", hvd, torch)), ("cupy", cupy(cp))]


# The training paths and the lines each needs: ready when all are OK.
PATHS: Dict[str, Tuple[str, ...]] = {
    "TensorFlow + Horovod": ("tensorflow", "horovod", "hvd-tensorflow", "check-build"),
    "horovod.torch": ("torch", "horovod", "hvd-torch", "check-build"),
    "torch DDP hook": ("torch", "ddp-hook"),
    "CuPy GPU kernels": ("cupy", "kernels"),
}


def path_states(statuses: Dict[str, str]) -> Dict[str, str]:
    """Each path: "ready", "broken" (a FIX among its lines) or "not installed"."""
    out = {}
    for path, names in PATHS.items():
        got = [statuses.get(n, SKIP) for n in names]
        out[path] = "ready" if all(s == OK for s in got) else "broken" if FIX in got else "not installed"
    return out


def summary(states: Dict[str, str]) -> Optional[str]:
    """One line per kind of path state."""
    parts = [f"{state}: {', '.join(p for p, s in states.items() if s == state)}"
             for state in ("ready", "broken", "not installed") if state in states.values()]
    return "; ".join(parts) or None
