"""`horovod-q8 bench training`: its arguments, and one real (tiny) run on loopback."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from horovod_q8.bench import training


def parse(*argv: str):
    return training.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv,message", [
    (["--ranks", "1"], "--ranks must be >= 2"),
    (["--compressions", "none,q9"], "unknown 'q9'"),
    (["--steps-per-epoch", "2"], "--steps-per-epoch must be >= 3"),
])
def test_refuses(argv, message):
    problems = training.check_args(parse(*argv))
    assert any(message in p for p in problems), problems


def test_each_compression_trains_the_same_model_and_batch():
    args = parse("--mlp-width", "512", "--batch-size", "8")
    q8 = training.train_command(args, "q8", "s.json")
    fp16 = training.train_command(args, "fp16", "s.json")
    assert q8[:2] == ["horovod-q8", "train"] and "--synthetic" in q8 and "--fused" in q8
    assert "--fused" not in fp16  # Horovod's own compressions go through Horovod's optimizer
    strip = [a for a in q8 if a not in ("q8", "--fused")]
    assert strip == [a for a in fp16 if a != "fp16"]
    assert "--fused" not in training.train_command(parse("--stock"), "q8", "s.json")


@pytest.mark.parallel
def test_runs_on_loopback_and_prints_the_table():
    proc = subprocess.run([sys.executable, "-m", "horovod_q8.cli", "bench", "training", "--compressions",
                           "none,q8", "--mlp-width", "64", "--steps-per-epoch", "4", "--epochs", "1"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = re.findall(r"^\| (none|q8) \| ([0-9.]+) \|", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["none", "q8"] and all(float(r[1]) > 0 for r in rows), proc.stdout
    assert "compute only (1 rank on" in proc.stdout


def test_steady_rate_leaves_out_the_time_between_epochs():
    """Validation between epochs is not a training step: with it counted, every compression's
    steps would grow by the same time and their ratios move towards 1."""
    from horovod_q8.workloads.common import steady_rate

    one_epoch = [[0.0, 1.0, 2.0, 2.5, 3.0]]  # the first 2 batches skipped: 2 steps in 1 s
    assert steady_rate(one_epoch, 8) == pytest.approx(16.0)
    with_validation = [[0.0, 1.0, 2.0, 2.5, 3.0], [30.0, 30.5, 31.0]]  # 27 s of validation between
    assert steady_rate(with_validation, 8) == pytest.approx(4 * 8 / 2.0)
    assert steady_rate([[0.0, 1.0]], 8) == 0.0


def test_bench_training_options_checked_before_any_run():
    from horovod_q8.bench import training
    args = training.build_parser().parse_args(["--compressions", "auto,q9", "--pipeline-elements", "-5",
                                               "--data-dir", "/data"])
    problems = "; ".join(training.check_args(args))
    assert "--pipeline-elements must be >= 0" in problems and "unknown 'q9'" in problems
    assert "auto" not in problems.split("unknown")[1].split(";")[0]  # auto is a compression train takes
    assert "--data-dir applies with --real-data" in problems
    args = training.build_parser().parse_args(["cifar10", "--real-data", "--data-dir", "/data/cifar"])
    assert training.check_args(args) == []
    cmd = training.train_command(args, "q8", "s.json")
    assert cmd[cmd.index("--data-dir") + 1] == "/data/cifar" and "--synthetic" not in cmd
