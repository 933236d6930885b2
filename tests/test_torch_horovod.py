"""horovod.torch with horovod_q8 under horovodrun -np 2 / -np 3 (tests/parallel/torch_hvd_checks.py)."""
from __future__ import annotations

import shutil
import time
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest

pytest.importorskip("torch")
from horovod_q8.torch import horovod_torch_built  # noqa: E402

if not horovod_torch_built():
    pytest.skip("horovod.torch is not built here (Horovod needs HOROVOD_WITH_PYTORCH=1 and a torch it "
                "builds against)", allow_module_level=True)
pytestmark = pytest.mark.parallel

from torch_procs import run_bounded  # noqa: E402

SCRIPT = Path(__file__).parent / "parallel" / "torch_hvd_checks.py"
ALL = "q8,q8_linear,q8_mantissa,q8_static_tree,q4,twobit,q4_threshold"


def horovodrun() -> str:
    found = Path(sys.executable).parent / "horovodrun"
    return str(found) if found.exists() else shutil.which("horovodrun")


def run(n: int, formats: str, *checks: str, controller: str = "--gloo", timeout: float = 900,
        env: Optional[Dict[str, str]] = None) -> str:
    cmd = [horovodrun(), "-np", str(n), "-H", f"localhost:{n}", controller, sys.executable, str(SCRIPT),
           formats, *checks]
    rc, out = run_bounded(cmd, timeout, env)
    assert rc == 0, out[-6000:]
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_allreduce_every_compression(n):
    out = run(n, ALL, "codebook", "threshold", "edges", "any_order")
    assert "OK" in out and "q4_threshold: error feedback converges" in out


@pytest.mark.parametrize("n", [2, 3])
def test_distributed_optimizer_fused_and_per_tensor(n):
    # state_dict compares a restored optimizer's step with the uninterrupted one bit for bit.
    # Buckets too small to compress take Horovod's own allreduce, which fuses whichever are
    # ready in the same cycle; at 3 ranks the ring then adds an element's 3 terms in an order
    # set by its offset in the fusion buffer, so the bits would depend on timing: no fusion.
    out = run(n, "q8,q4_threshold", "optimizer", "state_dict", "dtypes", "bfloat16",
              env={"HOROVOD_FUSION_THRESHOLD": "0"})
    assert "q4_threshold: optimizer state_dict carries residuals" in out
    assert "q4_threshold: bfloat16 plain, warm-up, compressed, Auto and fused ok" in out


@pytest.mark.parametrize("n", [2, 3])
def test_resume_as_horovods_examples(n):
    """Rank 0 alone loads the checkpoint, then broadcast_optimizer_state: no hang, identical
    weights; zero_grad() between backward and step() and unnamed named_parameters are
    sentences; a bucket whose slots would make two pieces goes as pieces."""
    out = run(n, "q8", "resume", timeout=300)
    assert "q8: resumed from rank 0 with broadcast_optimizer_state, zero_grad refused, pieces ok" in out


@pytest.mark.parametrize("n", [2, 3])
def test_two_optimizers_over_one_backward(n):
    """Each rank skips another layer each step: the buckets hooks start differ by rank; each
    optimizer's step sends its own second round only (at 3 ranks this hung before)."""
    out = run(n, "q8,q4_threshold", "two_optimizers", timeout=300)
    assert "q4_threshold: two fused optimizers over one backward, unused parameters by rank ok" in out


@pytest.mark.parametrize("allow", ["none+fp16+q8+q4", "q8"])
def test_auto_per_tensor_and_optimizer(allow):
    """Also with none not allowed: calibration still times the link as none."""
    out = run(2, allow, "auto")
    assert "identical to the fixed ones ok" in out and "horovod_q8 Auto: 1" in out, out[-3000:]


def test_auto_fused_buckets_as_fp16():
    """HOROVOD_Q8_AUTO=fp16: the fused optimizer's buckets go through Horovod's fp16 compressor."""
    out = run(2, "none+fp16+q8+q4", "auto", env={"HOROVOD_Q8_AUTO": "fp16"})
    assert "buckets chose ['fp16', 'fp16', 'fp16'], each as its compressor ok" in out, out[-3000:]


def test_mpi_controller():
    run(3, "q8", "codebook", "any_order", "optimizer", controller="--mpi")


def test_parameter_order_may_differ_by_rank():
    out = run(2, "q8", "parameter_order", timeout=600)
    assert "named_parameters in another order on rank 1 ok" in out, out[-3000:]


def test_mismatched_settings_stop_every_rank():
    out = run(2, "q8", "config_mismatch", timeout=300)
    assert out.count("mismatched settings detected") == 2, out[-3000:]


DISAGREE = Path(__file__).parent / "parallel" / "torch_disagree.py"


@pytest.mark.parametrize("case", ["optimizer_vs_none", "none_vs_optimizer", "allreduce_vs_none"])
def test_compressed_and_uncompressed_ranks_both_stop_with_a_sentence(case):
    """One rank with horovod_q8's q8, the other with compressor("none"): every rank raises
    ConfigMismatchError naming the difference, at once (no timeout involved)."""
    t0 = time.monotonic()
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(DISAGREE), case]
    rc, out = run_bounded(cmd, 120)
    assert rc == 0, out[-4000:]
    assert out.count("DISAGREEMENT rank") == 2, out[-4000:]
    assert "compression=horovod_q8 'q8' here vs 'none' there" in out, out[-4000:]
    assert time.monotonic() - t0 < 60


def test_ranks_with_different_buckets_both_stop_with_a_sentence():
    """Both ranks q8, the fused optimizer's fusion_bytes differing: the buckets would differ, so
    every rank raises ConfigMismatchError naming fusion_bytes, before the first step."""
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(DISAGREE), "fusion_bytes"]
    rc, out = run_bounded(cmd, 120)
    assert rc == 0, out[-4000:]
    assert out.count("DISAGREEMENT rank") == 2, out[-4000:]
    assert "fusion_bytes=67108864 here vs 4000 there" in out or "fusion_bytes=4000 here vs 67108864 there" in out, \
        out[-4000:]


def test_rank_without_horovod_q8_ends_the_job():
    """Rank 1 calls Horovod's allreduce directly: rank 0's watchdog ends the job with a message."""
    t0 = time.monotonic()
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(DISAGREE),
           "allreduce_unwrapped"]
    rc, out = run_bounded(cmd, 150, env={"HOROVOD_Q8_CHECK_TIMEOUT_S": "15"})
    assert rc != 0, out[-4000:]
    assert "rank 0 waited 15 s for every rank at the collective 'horovod_q8.agree.allreduce.1'" in out, out[-4000:]
    assert time.monotonic() - t0 < 90
