"""Shared pytest fixtures and the GPU policy."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from horovod_q8 import _compat


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: the CUDA backend: on a GPU, or on the CUDA host build")
    config.addinivalue_line("markers", "parallel: starts real Horovod processes")


def _require_gpu() -> bool:
    return os.environ.get("HOROVOD_Q8_REQUIRE_GPU") == "1"


@pytest.fixture
def real_cp():
    """CuPy on a GPU; skipped without one, failed instead when HOROVOD_Q8_REQUIRE_GPU=1."""
    mod = _compat.cupy()
    if mod is None:
        if _require_gpu():
            pytest.fail("HOROVOD_Q8_REQUIRE_GPU=1 but CuPy cannot see a GPU")
        pytest.skip("no CuPy GPU here (HOROVOD_Q8_REQUIRE_GPU=1 turns this into a failure)")
    return mod


@pytest.fixture
def cp():
    """CuPy on a GPU where one is here; else the CUDA host build: kernels/codec.cu compiled for
    the CPU behind a CuPy-shaped module (backends/cuda_host.py), so the CUDA backend runs."""
    from horovod_q8.backends import cuda_host
    mod = _compat.cupy()
    if mod is not None:
        yield mod
        return
    if _require_gpu():
        pytest.fail("HOROVOD_Q8_REQUIRE_GPU=1 but CuPy cannot see a GPU")
    why = cuda_host.unavailable()
    if why:
        pytest.skip(why)
    with cuda_host.device() as dev:
        yield dev


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def numba_only(monkeypatch):
    """The CPU backend with its native kernels switched off: every encode, decode and sum
    through Numba, as on a CPU without AVX2 or with HOROVOD_Q8_NATIVE=0."""
    from horovod_q8.backends import cpu

    monkeypatch.setattr(cpu, "native_encoder", lambda fmt, n: None)
    monkeypatch.setattr(cpu, "native_decoder", lambda fmt, n: None)
    monkeypatch.setattr(cpu, "avx2_decodes", lambda fmt, n: False)
    monkeypatch.setattr(cpu.native, "in_use", lambda: False)  # the threshold encode asks it
    return cpu


def edge_tensor(n: int, rng) -> np.ndarray:
    """Normal values over six decades; from 3001 elements on also a NaN block, an overflowed
    block (+-Inf: +-1, finite: 0), a block of zeros and a -0.0."""
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3], n)).astype(np.float32)
    if n > 3000:
        x[5] = np.nan
        x[2100] = np.inf
        x[2101] = -np.inf
        x[1024:2048] = 0.0
        x[1030] = -0.0
    return x


ROOT = Path(__file__).resolve().parents[1]


def poisoned_env(folder: Path, packages: Sequence[str]) -> dict:
    """An environment in which importing any of `packages` raises ImportError('poisoned: ...')."""
    for pkg in packages:
        (folder / pkg).mkdir()
        (folder / pkg / "__init__.py").write_text(f"raise ImportError('poisoned: {pkg} imported')\n")
    path = os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path)


def cli(env: dict, *argv: str) -> subprocess.CompletedProcess:
    """`horovod-q8 ARGV` in a subprocess with this environment."""
    return subprocess.run([sys.executable, "-m", "horovod_q8.cli", *argv], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)
