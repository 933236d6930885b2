"""Short real trainings under horovodrun -np 2 on each loader's file format: the loss falls,
the checkpoint resumes, the summary line is printed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import datagen

pytest.importorskip("horovod.tensorflow")
pytestmark = pytest.mark.parallel

CASES = {
    "mnist": (lambda d: datagen.mnist(d), ["--batch-size", "32", "--lr", "0.01"]),
    "cifar10": (lambda d: datagen.cifar10(d), ["--batch-size", "16", "--lr", "0.01"]),
    "imagenet-folders": (lambda d: datagen.imagenet_folders(d),
                         ["--batch-size", "8", "--image-size", "32", "--lr", "0.0001"]),
    "imagenet-tfrecords": (lambda d: datagen.imagenet_tfrecords(d),
                           ["--batch-size", "8", "--image-size", "32", "--num-classes", "2", "--lr", "0.0001"]),
}


def train(dataset: str, data_dir, extra, ckpt, out, epochs: int):
    from test_parallel import horovodrun
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m",
           "horovod_q8.workloads.train", dataset.split("-")[0], "--data-dir", str(data_dir),
           "--compression", "q8", "--fused", "--epochs", str(epochs), "--steps-per-epoch", "6",
           "--warmup-epochs", "0", "--checkpoint-dir", str(ckpt),
           "--results-json", str(out), "--verbose", "0", *extra]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return proc.stdout, json.loads(out.read_text())


@pytest.mark.parametrize("case", list(CASES))
def test_short_training_learns_and_resumes(case, tmp_path):
    make, extra = CASES[case]
    data = make(tmp_path / "data")
    ckpt = tmp_path / "ckpt"
    out, summary = train(case, data, extra, ckpt, tmp_path / "a.json", epochs=3)
    losses = summary["loss_per_epoch"]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    assert "SUMMARY compression=q8 fused=True ranks=2" in out
    assert summary["bytes_per_step"] > 0 and summary["test_accuracy"] is not None
    report = subprocess.run([sys.executable, "-m", "horovod_q8.cli", "report", str(tmp_path)],  # a flat --out folder
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "| q8 | 1 |" in report.stdout, report.stdout + report.stderr
    out, summary = train(case, data, extra, ckpt, tmp_path / "b.json", epochs=4)
    assert "at epoch 3" in out and len(summary["loss_per_epoch"]) == 1
    if case == "mnist":  # once more, done already and with another format: said, not silent
        out, _ = train(case, data, [*extra, "--compression", "q4"], ckpt, tmp_path / "c.json", epochs=4)
        assert "nothing to train: the checkpoint is at epoch 4 and --epochs is 4" in out, out[-3000:]
        assert "the checkpoint was trained with --compression q8, this run uses q4" in out, out[-3000:]


def test_missing_dataset_is_a_clear_error(tmp_path):
    from test_parallel import horovodrun
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m",
           "horovod_q8.workloads.train", "mnist", "--data-dir", str(tmp_path / "missing")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "MNIST: data directory" in proc.stdout + proc.stderr


@pytest.mark.parametrize("framework", ["tensorflow", "torch"])
def test_ranks_started_differently_stop_with_a_sentence(framework, tmp_path):
    """Other --epochs on one rank used to hang (every rank waits in a collective the other never
    starts); another --lr trained two models. Each rank now names what differs and exits."""
    from test_parallel import horovodrun
    if framework == "torch":
        pytest.importorskip("horovod.torch")
    script = tmp_path / "per_rank.py"
    script.write_text("import os, sys\nfrom horovod_q8.cli import main\n"
                      "extra = ['--epochs', '2', '--lr', '0.5'] if os.environ['HOROVOD_RANK'] == '1' else []\n"
                      "main(sys.argv[1:] + extra)\n")
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script), "train", "mnist",
           "--synthetic", "--steps-per-epoch", "2", "--batch-size", "8", "--compression", "q8", "--verbose", "0",
           "--framework", framework]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "--epochs (rank 0: 3, rank 1: 2)" in out and "--lr (rank 0: 0.02, rank 1: 0.5)" in out, out[-3000:]
    assert "Traceback" not in out.split("the ranks were started")[0][-2000:]
