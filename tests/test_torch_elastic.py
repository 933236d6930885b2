"""Elastic Horovod with horovod_q8 (tests/parallel/torch_elastic.py): a rank joins, then leaves,
under `horovodrun --min-np 2 --max-np 3 --host-discovery-script`, real processes on this machine."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
from horovod_q8.torch import horovod_torch_built  # noqa: E402

if not horovod_torch_built():
    pytest.skip("horovod.torch is not built here", allow_module_level=True)
pytestmark = pytest.mark.parallel

from test_torch_horovod import horovodrun  # noqa: E402
from torch_procs import run_bounded  # noqa: E402

SCRIPT = Path(__file__).parent / "parallel" / "torch_elastic.py"
DISCOVER = """#!/bin/sh
d=$(dirname "$0")
if [ -f "$d/shrink" ]; then echo localhost:2; elif [ -f "$d/grow" ]; then echo localhost:3; else echo localhost:2; fi
"""


@pytest.mark.parametrize("compression,fused,warmup", [
    ("q8", "1", 5),    # the fused optimizer; the rank that joins ends its warm-up with the others
    ("q8", "0", 5),    # Horovod's optimizer, horovod_q8's compressor per tensor
    ("none", "1", 0),  # horovod_q8 imported, Horovod's own compression: builds without collectives
    ("auto", "1", 0),  # Auto measures again with the new ranks
    ("auto", "0", 2),
])
def test_a_rank_joins_then_leaves(tmp_path, compression, fused, warmup):
    discover = tmp_path / "discover.sh"
    discover.write_text(DISCOVER)
    discover.chmod(0o755)
    cmd = [horovodrun(), "--network-interface", "lo", "-np", "2", "--min-np", "2", "--max-np", "3",
           "--host-discovery-script", str(discover), sys.executable, str(SCRIPT), compression, fused, str(warmup)]
    rc, out = run_bounded(cmd, 300, {"ELASTIC_FLAG_DIR": str(tmp_path), "HOROVOD_Q8_CHECK_TIMEOUT_S": "60"})
    assert rc == 0, out[-6000:]
    assert f"SUMMARY {compression} fused={fused} warmup={warmup} sizes=22223333222" in out, out[-3000:]
