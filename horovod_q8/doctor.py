"""`horovod-q8 doctor`: which training paths this machine can run (TensorFlow + Horovod,
horovod.torch, the torch.distributed DDP hook, CuPy on a GPU), one line per check: OK, FIX
(installed but broken or half installed: what to do) or SKIP (not installed, and what it is only
needed for). Exit 0 when at least one path is ready and nothing needs a fix."""
from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from horovod_q8 import doctor_paths
from horovod_q8.doctor_paths import FIX, OK, SKIP, Check


def _kernels(source: Optional[str] = None) -> Check:
    """The CUDA kernels compiled as CuPy compiles them: on a GPU by CuPy itself; without one
    through CuPy's NVRTC wrapper (`backends.nvrtc_check`), since `nvcc -ptx` accepts what NVRTC
    refuses (INFINITY); with nvcc alone, nvcc's verdict, said as such."""
    import importlib.util

    from horovod_q8 import _compat
    from horovod_q8.backends import kernel_source
    source = kernel_source() if source is None else source
    cp = _compat.cupy()
    if cp is not None:
        try:
            cp.RawModule(code=source).get_function("decode")
            return OK, "CUDA kernels compile with NVRTC"
        except Exception as e:
            return FIX, f"CUDA kernels do not compile: {e}"
    if importlib.util.find_spec("cupy") is not None:
        return _nvrtc_without_gpu(source)
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return SKIP, "no GPU and no nvcc: CUDA kernels not checked"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "codec.cu"
        src.write_text(source)
        out = subprocess.run([nvcc, "-ptx", str(src), "-o", str(Path(d) / "c.ptx")], capture_output=True, text=True)
    if out.returncode != 0:
        return FIX, out.stderr[-300:]
    return SKIP, "no GPU: CUDA kernels compile with nvcc -ptx, not run (NVRTC, which CuPy uses, needs CuPy to check)"


def _nvrtc_without_gpu(source: str) -> Check:
    from horovod_q8.backends import cuda, nvrtc_check
    arch = nvrtc_check.ARCHS[0]
    try:
        nvrtc_check.check_cupy_assembly()
        r = nvrtc_check.compile_like_cupy(source, cuda.OPTIONS, arch)
    except Exception as e:  # a node without CUDA's NVRTC library: nothing to fix there
        return SKIP, f"no GPU, and CuPy cannot run NVRTC here ({type(e).__name__}: {str(e)[:200]})"
    if not r.ok:
        why = r.error or "; ".join(r.warnings) or "a kernel spills registers"
        return FIX, f"CUDA kernels do not compile as CuPy compiles them (sm_{arch}): {why[-300:]}"
    return SKIP, f"no GPU: CUDA kernels compile with NVRTC as CuPy does (sm_{arch}, {len(r.kernels)} kernels), not run"


def _cpu_kernels() -> Check:
    from horovod_q8 import _compat
    from horovod_q8.backends import native
    numba = doctor_paths.load("numba")
    if numba.state == "broken":
        return FIX, f"numba is installed but does not import ({numba.error}); reinstall it"
    if _compat.has_numba():
        return OK, "Numba CPU kernels available"
    if numba.state == "ok":
        return SKIP, "numba not used (HOROVOD_Q8_BACKEND=numpy)"
    # not a FIX: every path still runs (GPU tensors on CuPy's kernels), only CPU tensors slowly
    kernels = ", the native kernels being reached through Numba's backend" if native.in_use() else ""
    return SKIP, (f"numba not installed: CPU tensors are encoded by the NumPy reference, over 100x slower than "
                  f"the Numba kernels{kernels} (pip install numba, a dependency of horovod_q8; GPU tensors use "
                  "CuPy's kernels)")


def _native_kernels() -> Check:
    from horovod_q8 import _compat
    from horovod_q8.backends import native
    if not _compat.has_numba():
        return SKIP, "not used: the CPU backend that calls them needs numba; " + native.describe()
    return OK, ("" if native.in_use() else "not used, the Numba kernels instead: ") + native.describe()


def _threads() -> Check:
    from horovod_q8.cores import codec_threads
    count, why = codec_threads()
    return OK, (f"the CPU codec runs on {count} thread{'s' if count > 1 else ''} per process: {why}"
                + ("" if why.startswith("NUMBA_NUM_THREADS") else " (NUMBA_NUM_THREADS sets it)"))


def _auto() -> Check:
    """What Auto would choose here for a bucket of the default size on 2 ranks, by link rate, from
    this machine's codec rates (a job measures its real link at start)."""
    from horovod_q8.collective import auto, policy

    rates = auto.codec_rates(auto.DEFAULT_ALLOW, n=1 << 20)
    mib = policy.DEFAULT_FUSION_BYTES >> 20
    ranges = auto.choices_by_link(rates, n=policy.DEFAULT_FUSION_BYTES // 4)
    shown = "; ".join(f"{name} " + (f"below {hi:.3g}" if lo == 0 else f"from {lo:.3g}" if hi == float("inf")
                                    else f"{lo:.3g}-{hi:.3g}") + " Gbit/s" for lo, hi, name in ranges)
    codec = ", ".join(f"{name} {enc / 1e9:.2f}/{dec / 1e9:.2f}/{sm / 1e9:.2f}" for name, enc, dec, sm in rates)
    return OK, (f"Auto, 2 ranks, {mib} MiB buckets, by link: {shown} (codec here, G elements/s encode/decode/"
                f"sum of 2 ranks per part: "
                f"{codec}; a job measures its link at start)")


def _mpi() -> Check:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        return SKIP, ("mpirun not installed (only needed for Horovod's MPI controller and the mpirun / Slurm "
                      "templates: apt-get install openmpi-bin libopenmpi-dev)")
    out = subprocess.run([mpirun, "--version"], capture_output=True, text=True)
    return OK, out.stdout.splitlines()[0] if out.stdout else "mpirun found"


def _network() -> Check:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    ib = sorted(p.name for p in Path("/sys/class/infiniband").glob("*")) if Path("/sys/class/infiniband").exists() else []
    hint = "pass --iface and --ib-device to horovod-q8 launch" if ib else \
        "pass --iface to horovod-q8 launch; no --ib-device on Ethernet"
    return OK, f"interfaces: {', '.join(names) or '?'}; InfiniBand HCAs: {', '.join(ib) or 'none'} ({hint})"


HOST_CHECKS: List[Tuple[str, Callable[[], Check]]] = [
    ("mpi", _mpi), ("numba", _cpu_kernels), ("native", _native_kernels), ("threads", _threads),
    ("kernels", _kernels),
    ("auto", _auto), ("network", _network)]


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    return p or argparse.ArgumentParser(prog="horovod-q8 doctor", description=__doc__)


def _safe(check: Callable[[], Check]) -> Check:
    try:
        return check()
    except Exception as e:  # a check must never crash the report
        return FIX, f"check failed: {type(e).__name__}: {e}"


def _line(status: str, name: str, msg: str) -> None:
    print(f"{status:4s} {name:14s} {msg}", flush=True)


def run(args: argparse.Namespace) -> int:
    statuses: Dict[str, str] = {}
    for name, (status, msg) in _safe_framework_checks():
        statuses[name] = status
        _line(status, name, msg)
    for name, check in HOST_CHECKS:
        status, msg = _safe(check)
        statuses[name] = status
        _line(status, name, msg)
    states = doctor_paths.path_states(statuses)
    print(f"paths: {doctor_paths.summary(states)}", flush=True)
    to_fix = [n for n, s in statuses.items() if s == FIX]
    if to_fix:
        print(f"doctor: fix {', '.join(to_fix)} (the FIX lines above)", flush=True)
        return 1
    if "ready" not in states.values():
        print("doctor: no path is ready; the quick starts are in README.md (TensorFlow + Horovod: "
              "scripts/setup.sh; PyTorch without Horovod: pip install torch)", flush=True)
        return 1
    return 0


def _safe_framework_checks() -> List[Tuple[str, Check]]:
    try:
        return doctor_paths.framework_checks()
    except Exception as e:
        return [("frameworks", (FIX, f"check failed: {type(e).__name__}: {e}"))]


def main(argv=None) -> None:
    sys.exit(run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
