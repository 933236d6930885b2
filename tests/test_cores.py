"""The codec's thread count: each process's share of the cores among the job's processes on a
host, as the launcher states them, or NUMBA_NUM_THREADS where the user set it."""
import numba
import numpy as np
import pytest

from horovod_q8 import cores
from horovod_q8.backends import cpu, cpu_kernels
from horovod_q8.formats import get


@pytest.fixture
def clean(monkeypatch):
    for var in (*cores.LOCAL_SIZE_VARS, cores.THREADS_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cores, "usable_cores", lambda: list(range(8)))
    cpu_kernels._share.cache_clear()
    yield monkeypatch
    cpu_kernels._share.cache_clear()


@pytest.mark.parametrize("var", cores.LOCAL_SIZE_VARS)
def test_each_launcher_variable_gives_the_share(clean, var):
    clean.setenv(var, "4")
    assert cores.local_processes() == (4, var)
    count, why = cores.codec_threads()
    assert count == 2 and var in why and "4 processes" in why


def test_no_launcher_means_every_core(clean):
    assert cores.local_processes() == (1, "")
    assert cores.codec_threads()[0] == 8


def test_unreadable_values_are_skipped_in_order(clean):
    clean.setenv("HOROVOD_LOCAL_SIZE", "0")
    clean.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "x")
    clean.setenv("SLURM_NTASKS_PER_NODE", "2(x3)")
    clean.setenv("MPI_LOCALNRANKS", "3")
    assert cores.local_processes() == (3, "MPI_LOCALNRANKS")
    assert cores.codec_threads()[0] == 2  # 8 // 3


def test_more_processes_than_cores_still_one_thread(clean):
    clean.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "16")
    assert cores.codec_threads()[0] == 1


def test_the_users_numba_num_threads_wins(clean):
    clean.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    clean.setenv(cores.THREADS_ENV, "3")
    assert cores.codec_threads() == (3, "NUMBA_NUM_THREADS=3")


def test_kernels_run_on_the_share(clean):
    """A parallel Numba kernel and the native pool take the share, at most Numba's pool."""
    clean.setenv("HOROVOD_LOCAL_SIZE", "8")
    n = cpu_kernels.PARALLEL_MIN
    assert cpu.threads(n) == 1 and cpu.threads(n - 1) == 1
    fmt = get("q8").for_shape((n,))
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    cpu_kernels.kernel("encode_codebook", n)
    assert numba.get_num_threads() == 1
    np.testing.assert_array_equal(cpu.encode(x, fmt), cpu.encode(x, fmt))
    clean.delenv("HOROVOD_LOCAL_SIZE")
    cpu_kernels._share.cache_clear()
    assert cpu.threads(n) == min(8, numba.config.NUMBA_NUM_THREADS)
    clean.setattr(cpu_kernels, "THREADS", 1)
    assert cpu.threads(n) == 1
