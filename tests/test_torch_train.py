"""`horovod-q8 train mnist --framework torch` and `bench allreduce --framework torch`: refusals
before torch is imported; one process; horovodrun -np 2 (parallel)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import datagen
from conftest import ROOT, cli, poisoned_env
from horovod_q8.workloads import torch_train, train


def problems(*argv: str) -> list:
    return torch_train.check_args(train.build_parser().parse_args(["mnist", "--framework", "torch", *argv]))


@pytest.mark.parametrize("argv,message", [
    (["--checkpoint-dir", "x"], "--checkpoint-dir is TensorFlow-only"),
    (["--log-dir", "x"], "--log-dir is TensorFlow-only"),
    (["--compression", "q8", "--threshold", "0.1"], "--threshold does not apply"),
    (["--epochs", "0"], "--epochs must be >= 1"),
])
def test_torch_train_refuses(argv, message):
    assert any(message in p for p in problems(*argv)), problems(*argv)


def test_torch_train_refuses_other_datasets():
    args = train.build_parser().parse_args(["cifar10", "--framework", "torch"])
    assert any("trains mnist only" in p for p in torch_train.check_args(args))


def test_refusals_come_before_torch_and_horovod(tmp_path):
    env = poisoned_env(tmp_path, ["torch", "horovod", "tensorflow"])
    proc = cli(env, "train", "cifar10", "--framework", "torch")
    assert proc.returncode == 2 and "trains mnist only" in proc.stderr, proc.stderr[-2000:]
    proc = cli(env, "bench", "allreduce", "--framework", "torch", "--resnet50")
    assert proc.returncode != 0 and "--resnet50 is TensorFlow-only" in proc.stderr, proc.stderr[-2000:]


def test_warmup_lr_is_horovods():
    # LearningRateWarmupCallback: multiplier(epoch + batch / steps), which adds 1 / steps
    assert torch_train.warmup_lr(0.04, 2, 1, 0, 0, 100) == pytest.approx(0.0202)
    assert torch_train.warmup_lr(0.04, 2, 1, 0, 50, 100) == pytest.approx(0.0302)
    assert torch_train.warmup_lr(0.04, 2, 1, 0, 99, 100) == pytest.approx(0.04)
    assert torch_train.warmup_lr(0.04, 4, 2, 1, 0, 10) == pytest.approx(0.01 * (1.1 * 3 / 2 + 1))
    assert torch_train.warmup_lr(0.04, 2, 1, 1, 0, 100) == pytest.approx(0.04)
    assert torch_train.warmup_lr(0.04, 2, 0, 0, 0, 100) == pytest.approx(0.04)


def test_keras_sgd_is_keras_momentum_under_a_changing_lr():
    """v = m v - lr g; w += v, with the LR of each step on that step's gradient only."""
    torch = pytest.importorskip("torch")
    from horovod_q8.workloads.torch_sgd import KerasSGD

    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = KerasSGD([w], lr=0.1, momentum=0.9)
    v, ref = torch.zeros(2), torch.tensor([1.0, -2.0])
    for lr, g in [(0.1, [1.0, 2.0]), (0.2, [0.5, -1.0]), (0.4, [-1.0, 0.25])]:
        opt.param_groups[0]["lr"] = lr
        w.grad = torch.tensor(g)
        opt.step()
        v = 0.9 * v - lr * torch.tensor(g)
        ref = ref + v
    assert torch.allclose(w.detach(), ref) and torch.allclose(opt.state[w]["velocity"], v)


def _train(tmp_path, launcher: list, compression: str, epochs: int = 3) -> tuple:
    data = datagen.mnist(tmp_path / "data")
    out = tmp_path / f"{compression}.json"
    cmd = launcher + [sys.executable, "-m", "horovod_q8.workloads.train", "mnist", "--framework", "torch",
                      "--data-dir", str(data), "--compression", compression, "--epochs", str(epochs),
                      "--batch-size", "32", "--lr", "0.01", "--warmup-epochs", "0",
                      "--results-json", str(out), "--verbose", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return proc.stdout, json.loads(out.read_text())


def test_one_process_learns(tmp_path):
    pytest.importorskip("torch")
    from horovod_q8.torch import horovod_torch_built
    if not horovod_torch_built():
        pytest.skip("horovod.torch is not built here")
    out, summary = _train(tmp_path, [], "q8")
    losses = summary["loss_per_epoch"]
    assert summary["framework"] == "torch" and summary["ranks"] == 1 and len(losses) == 3
    assert losses[-1] < losses[0], losses
    assert "SUMMARY framework=torch compression=q8 fused=True ranks=1" in out


@pytest.mark.parallel
@pytest.mark.parametrize("compression", ["q8", "fp16"])
def test_two_ranks_learn(tmp_path, compression):
    pytest.importorskip("torch")
    from horovod_q8.torch import horovod_torch_built
    if not horovod_torch_built():
        pytest.skip("horovod.torch is not built here")
    from test_torch_horovod import horovodrun
    out, summary = _train(tmp_path, [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo"], compression)
    losses = summary["loss_per_epoch"]
    assert summary["ranks"] == 2 and losses[-1] < losses[0], losses
    assert summary["bytes_per_step"] > 0 and summary["test_accuracy"] is not None
    assert f"SUMMARY framework=torch compression={compression} fused={compression == 'q8'} ranks=2" in out


@pytest.mark.parallel
def test_bench_allreduce_torch_two_ranks():
    pytest.importorskip("torch")
    from horovod_q8.torch import horovod_torch_built
    if not horovod_torch_built():
        pytest.skip("horovod.torch is not built here")
    from test_torch_horovod import horovodrun
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m", "horovod_q8.cli",
           "bench", "allreduce", "--framework", "torch", "--elements", "200000",
           "--compressions", "none,fp16,q8,q4", "--repeats", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 6 and cells[0] in ("none", "fp16", "q8", "q4"):
            rows[cells[0]] = cells
    assert set(rows) == {"none", "fp16", "q8", "q4"}, proc.stdout[-3000:]
    error = {name: float(cells[5]) for name, cells in rows.items()}
    sent = {name: float(cells[2]) for name, cells in rows.items()}
    assert error["none"] < 1e-6 and error["fp16"] < 1e-3 and error["q8"] < 0.05 and error["q4"] < 0.3, error
    assert sent["q4"] < sent["q8"] < sent["fp16"] < sent["none"], sent
