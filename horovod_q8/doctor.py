"""`horovod-q8 doctor`: is this machine ready? One line per check: OK, or what to do."""
from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, List, Optional, Tuple

Check = Tuple[bool, str]


def _horovod() -> Check:
    try:
        import horovod
        import horovod.tensorflow as hvd
    except Exception as e:
        return False, f"Horovod for TensorFlow does not import ({e}); run scripts/setup.sh"
    built = [n for n, f in (("Gloo", hvd.gloo_built), ("MPI", hvd.mpi_built), ("NCCL", hvd.nccl_built))
             if f()]
    return bool(built), f"Horovod {horovod.__version__} built with {', '.join(built) or 'no controller'}" + \
        ("" if hvd.nccl_built() else " (no NCCL: GPU clusters need HOROVOD_GPU_OPERATIONS=NCCL)")


def _check_build() -> Check:
    exe = Path(sys.executable).parent / "horovodrun"
    exe = str(exe) if exe.exists() else shutil.which("horovodrun")
    if not exe:
        return False, "horovodrun not found on PATH"
    out = subprocess.run([exe, "--check-build"], capture_output=True, text=True)
    ops = [line.strip(" [X]") for line in out.stdout.splitlines() if "[X]" in line]
    return out.returncode == 0, f"horovodrun --check-build: frameworks, controllers, tensor ops: {', '.join(ops)}"


def _tensorflow() -> Check:
    try:
        import tensorflow as tf
    except Exception as e:
        return False, f"TensorFlow does not import ({e})"
    try:
        import keras as keras_module
        keras = keras_module.__version__
    except Exception:
        keras = "?"
    ok = keras.startswith("2.")
    return ok, f"TensorFlow {tf.__version__}, Keras {keras}" + ("" if ok else " (Horovod 0.28.1 needs Keras 2: TF <= 2.15)")


def _cupy() -> Check:
    from horovod_q8 import _compat
    cp = _compat.cupy()
    if cp is None:
        return True, "CuPy or a GPU not found: the CPU kernels will be used (pip install horovod_q8[cuda12] on GPU hosts)"
    n = cp.cuda.runtime.getDeviceCount()
    return True, f"CuPy {cp.__version__}, {n} GPU(s): {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}"


def _kernels() -> Check:
    from horovod_q8 import _compat
    from horovod_q8.backends import kernel_source
    cp = _compat.cupy()
    if cp is not None:
        try:
            cp.RawModule(code=kernel_source()).get_function("decode")
            return True, "CUDA kernels compile with NVRTC"
        except Exception as e:
            return False, f"CUDA kernels do not compile: {e}"
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return True, "no GPU and no nvcc: CUDA kernels not checked"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "codec.cu"
        src.write_text(kernel_source())
        out = subprocess.run([nvcc, "-ptx", str(src), "-o", str(Path(d) / "c.ptx")], capture_output=True, text=True)
    return out.returncode == 0, "CUDA kernels compile with nvcc" if out.returncode == 0 else out.stderr[-300:]


def _cpu_kernels() -> Check:
    from horovod_q8 import _compat
    return (True, "Numba CPU kernels available") if _compat.has_numba() else \
        (False, "numba missing: the slow NumPy reference will be used (pip install numba)")


def _native_kernels() -> Check:
    from horovod_q8.backends import native
    return True, ("" if native.in_use() else "not used, the Numba kernels instead: ") + native.describe()


def _mpi() -> Check:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        return False, "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    out = subprocess.run([mpirun, "--version"], capture_output=True, text=True)
    return True, out.stdout.splitlines()[0] if out.stdout else "mpirun found"


def _network() -> Check:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    ib = sorted(p.name for p in Path("/sys/class/infiniband").glob("*")) if Path("/sys/class/infiniband").exists() else []
    return True, f"interfaces: {', '.join(names) or '?'}; InfiniBand HCAs: {', '.join(ib) or 'none'} " \
                 "(pass --iface and --ib-device to horovod-q8 launch)"


CHECKS: List[Tuple[str, Callable[[], Check]]] = [
    ("tensorflow", _tensorflow), ("horovod", _horovod), ("check-build", _check_build), ("mpi", _mpi),
    ("numba", _cpu_kernels), ("native", _native_kernels), ("cupy", _cupy), ("kernels", _kernels), ("network", _network)]


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    return p or argparse.ArgumentParser(prog="horovod-q8 doctor", description=__doc__)


def run(args: argparse.Namespace) -> int:
    failed = 0
    for name, check in CHECKS:
        try:
            ok, msg = check()
        except Exception as e:  # a check must never crash the report
            ok, msg = False, f"check failed: {e}"
        failed += not ok
        print(f"{'OK  ' if ok else 'FIX '} {name:12s} {msg}", flush=True)
    return 1 if failed else 0


def main(argv=None) -> None:
    sys.exit(run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
