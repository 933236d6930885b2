"""The DDP communication hook on 2 and 3 Gloo ranks under torch.multiprocessing."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.parallel

from torch_procs import run_bounded  # noqa: E402

SCRIPT = Path(__file__).parent / "parallel" / "torch_ddp_checks.py"
NUMERICS = ["budgets", "small_stays_exact", "nan_inf", "threshold_feedback", "state_dict"]


def run(n: int, *checks: str, timeout: float = 600):
    rc, out = run_bounded([sys.executable, str(SCRIPT), str(n), *checks], timeout)
    assert rc == 0, out[-6000:]
    assert f"OK {n} ranks" in out  # the checks ran, on every rank (rank 0 prints after a barrier)
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_hook_numerics(n):
    run(n, *NUMERICS)


@pytest.mark.parametrize("n", [2, 3])
def test_ddp_training_with_the_hook(n):
    run(n, "ddp_training")


def test_hook_under_ddp_options():
    """bfloat16 (where Gloo carries it: torch 2.11's lane) and float64 models, no_sync(),
    gradient_as_bucket_view, static_graph, find_unused_parameters; q8 and Auto."""
    run(2, "ddp_options")


def test_hook_under_torch_compile():
    """torch.compile(DDP model) with the hook; torch 2.0.1 cannot compile on Python 3.11."""
    import torch
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 1):
        pytest.skip(f"torch {torch.__version__}: torch.compile needs torch >= 2.1 on Python 3.11")
    run(2, "compiled")


def test_auto_hook():
    run(2, "auto")


def test_residuals_follow_their_parameters_when_ddp_rebuilds_buckets():
    """DDP reorders its buckets after the first step: a zero gradient stays zero under error
    feedback (residuals keyed by the bucket's parameters); a sparse gradient, and ranks whose
    buckets differ, are stopped with a sentence."""
    run(2, "rebuilt_buckets", "sparse_refused", "bucket_mismatch")


def test_mismatched_settings_stop_every_rank():
    run(2, "config_mismatch")


def test_unknown_check_is_refused():
    rc, out = run_bounded([sys.executable, str(SCRIPT), "2", "no_such_check"], 120)
    assert rc != 0 and "unknown checks" in out


def test_hook_on_one_rank_only_ends_every_rank_with_a_sentence():
    """Rank 0 registers the hook, rank 1 does not (DDP's own allreduce there): rank 0 names rank 1
    after HOROVOD_Q8_CHECK_TIMEOUT_S, and the job ends instead of hanging."""
    import time
    t0 = time.monotonic()
    rc, out = run_bounded([sys.executable, str(Path(__file__).parent / "parallel" / "torch_disagree.py"),
                           "ddp_hook_on_one_rank"], 120, env={"HOROVOD_Q8_CHECK_TIMEOUT_S": "10"})
    assert rc != 0, out[-4000:]
    assert "horovod_q8: rank 0 waited 10 s for rank(s) [1] at the ddp_hook check" in out, out[-4000:]
    assert "NO ERROR" not in out
    assert time.monotonic() - t0 < 60
