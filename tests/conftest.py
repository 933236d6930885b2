"""Shared pytest fixtures and the GPU policy."""
from __future__ import annotations

import os

import numpy as np
import pytest

from horovod_q8 import _compat


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs CuPy and a CUDA GPU")
    config.addinivalue_line("markers", "parallel: starts real Horovod processes")


@pytest.fixture
def cp():
    """CuPy on a GPU; skipped without one, failed instead when HOROVOD_Q8_REQUIRE_GPU=1."""
    mod = _compat.cupy()
    if mod is None:
        if os.environ.get("HOROVOD_Q8_REQUIRE_GPU") == "1":
            pytest.fail("HOROVOD_Q8_REQUIRE_GPU=1 but CuPy cannot see a GPU")
        pytest.skip("no CuPy GPU here (HOROVOD_Q8_REQUIRE_GPU=1 turns this into a failure)")
    return mod


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
