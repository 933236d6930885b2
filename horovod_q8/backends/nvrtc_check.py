"""Compile kernels/codec.cu as CuPy's RawModule does, without a GPU, and report each kernel's
registers, shared memory and spills (ptxas -v).

CuPy's `RawModule.compile()` asks the driver for the device's architecture, so this goes one level
below it: the options `backends.cuda` passes, plus what CuPy's `_compile_with_cache_cuda` and
NVRTC step add (-ftz=true, -arch=sm_XX, --device-as-default-execution-space, --pch where CuPy
would), through CuPy's own NVRTC program wrapper. `check_cupy_assembly` fails if the installed
CuPy no longer assembles its options that way. Command: `python -m horovod_q8.backends.nvrtc_check`.
"""
from __future__ import annotations

import argparse
import inspect
import io
import re
import sys
from dataclasses import dataclass, field
from typing import Sequence

ARCHS = ("90", "80")  # H200 / H100, A100
_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")


@dataclass
class KernelReport:
    name: str
    registers: int = 0
    smem: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0


@dataclass
class Report:
    arch: str
    options: tuple
    kernels: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return (not self.error and not self.warnings and bool(self.kernels)
                and all(k.spill_stores == k.spill_loads == k.stack == 0 for k in self.kernels))


def _compiler():
    from cupy.cuda import compiler
    return compiler


def check_cupy_assembly() -> None:
    """Raise if the installed CuPy assembles NVRTC options differently from `cupy_options`."""
    c = _compiler()
    cache_src = inspect.getsource(c._compile_with_cache_cuda)
    nvrtc_src = inspect.getsource(c._compile_using_nvrtc_no_warning)
    expected = [(cache_src, "options += ('-ftz=true',)"),
                (nvrtc_src, "options += ('--device-as-default-execution-space',)"),
                (nvrtc_src, "_get_arch_for_options_for_nvrtc(arch)"),
                (nvrtc_src, "options += ('--pch',)")]
    missing = [text for src, text in expected if text not in src]
    if missing:
        import cupy
        raise RuntimeError(f"CuPy {cupy.__version__} assembles NVRTC options differently from "
                           f"nvrtc_check.cupy_options (not found: {missing}); update it")


def cupy_options(options: Sequence[str], arch: str) -> tuple[tuple, str]:
    """(the options NVRTC receives for a RawModule compiled with `options`, the output kind)."""
    c = _compiler()
    opts = tuple(options) + ("-ftz=true",)
    if c._get_bool_env_variable("CUPY_CUDA_COMPILE_WITH_DEBUG", False):
        opts += ("--device-debug", "--generate-line-info")
    if not c._use_ptx and int(arch) <= int(c._get_max_compute_capability()):
        opts, method = opts + (f"-arch=sm_{arch}",), "cubin"
    else:
        opts, method = opts + (f"-arch=compute_{arch}",), "ptx"
    opts += ("--device-as-default-execution-space",)
    major, minor = c._get_nvrtc_version()
    if (major >= 13 or (major == 12 and minor >= 8)) and c._use_pch:
        opts += ("--pch",)
    return opts, method


def compile_like_cupy(source: str, options: Sequence[str], arch: str) -> Report:
    """Compile `source` through CuPy's NVRTC wrapper with CuPy's options plus -Xptxas=-v."""
    c = _compiler()
    opts, method = cupy_options(options, arch)
    report = Report(arch=arch, options=opts)
    log = io.StringIO()
    try:
        c._NVRTCProgram(source, "kern.cu", method=method).compile(opts + ("-Xptxas=-v",), log)
    except c.CompileException as e:
        report.error = str(e)
        return report
    cur = None
    for line in log.getvalue().splitlines():
        if (m := _ENTRY.search(line)):
            cur = KernelReport(m.group(1))
            report.kernels.append(cur)
        elif cur and (m := _PROPS.search(line)):
            cur.stack, cur.spill_stores, cur.spill_loads = map(int, m.groups())
        elif cur and (m := _USED.search(line)):
            cur.registers, cur.smem = int(m.group(1)), int(m.group(2) or 0)
        elif "warning" in line.lower():
            report.warnings.append(line.strip())
    return report


def main(argv: Sequence[str] = ()) -> int:
    from horovod_q8.backends import cuda, kernel_source
    p = argparse.ArgumentParser(prog="python -m horovod_q8.backends.nvrtc_check", description=__doc__.split("\n")[0])
    p.add_argument("--arch", action="append", help=f"compute capability, e.g. 90 (default: {' '.join(ARCHS)})")
    p.add_argument("--source", help="a kernel file to compile instead of the shipped kernels/codec.cu")
    args = p.parse_args(list(argv))
    import cupy
    from cupy.cuda import nvrtc
    check_cupy_assembly()
    source = open(args.source).read() if args.source else kernel_source()
    print(f"CuPy {cupy.__version__}, NVRTC {'.'.join(map(str, nvrtc.getVersion()))}, "
          f"RawModule options {cuda.OPTIONS}")
    failed = 0
    for arch in args.arch or ARCHS:
        r = compile_like_cupy(source, cuda.OPTIONS, arch)
        print(f"sm_{arch}: {' '.join(r.options)}")
        if r.error:
            print(f"  ERROR\n{r.error}")
        for k in r.kernels:
            spill = k.spill_stores + k.spill_loads + k.stack
            print(f"  {k.name:20s} {k.registers:3d} registers {k.smem:5d} B smem "
                  f"{k.stack} B stack {k.spill_stores}/{k.spill_loads} B spilled{'  SPILLS' if spill else ''}")
        for w in r.warnings:
            print(f"  WARNING {w}")
        failed += not r.ok
        print(f"  {'ok' if r.ok else 'FAILED'}: {len(r.kernels)} kernels")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
