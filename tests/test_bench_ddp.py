"""`horovod-q8 bench ddp`: options refused before torch loads, and one real 2-rank run."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from horovod_q8.bench import ddp


def parse(*argv: str):
    return ddp.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv, problem", [
    (["--compressions", "none,q9"], "unknown compression 'q9'"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--ranks", "0"], "--ranks must be >= 1"),
    (["--bucket-mb", "-1"], "--bucket-mb must be > 0"),
])
def test_bad_options_are_refused(argv, problem):
    assert any(problem in p for p in ddp.problems(parse(*argv)))


def test_defaults_are_accepted():
    assert ddp.problems(parse()) == []


@pytest.mark.parallel
def test_one_loopback_run_prints_every_hook_side_by_side():
    pytest.importorskip("torch.distributed")
    proc = subprocess.run([sys.executable, "-m", "horovod_q8.cli", "bench", "ddp", "--ranks", "2", "--width", "256",
                           "--steps", "2", "--rounds", "1"], capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \([^)]*\) \| (.*)$", out, re.M)}
    assert set(rows) == {"none", "fp16", "q8", "q4"}, out
    sent = {k: float(v.split("|")[2]) for k, v in rows.items()}
    # MLP 784-256-256-10: 269,322 parameters; 2 ranks send one copy in a ring
    assert sent["none"] == pytest.approx(4 * 269_322 / 1e6, rel=0.01)
    assert sent["fp16"] == pytest.approx(sent["none"] / 2, rel=0.01)
    assert sent["none"] / 4.5 < sent["q8"] < sent["none"] / 3.5 and sent["q4"] < sent["q8"] / 1.8
