"""Compression state with one owner, saved and restored with it (issues 13 and 15).

- `horovod-q8 train --checkpoint-dir D`, stopped after epoch 1 and resumed, ends with the
  weights (and every rank's residuals) of an uninterrupted run, bit for bit, for q8 with error
  feedback and for twobit; swapping the two ranks' saved residuals changes the result, so the
  equality cannot come from state that was silently reset or shared.
- Two models with equal settings do not share residuals or step counters.
- `elastic_keras_state` commits and restores the compression state; Horovod's KerasState alone
  does not.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

pytest.importorskip("horovod.tensorflow")

from test_parallel import HERE, assert_ok, horovodrun, run  # noqa: E402

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
TIMEOUT = 600
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
CASES = {  # (train's options, environment)
    # warm-up ends with epoch 0: the resumed epoch runs on the checkpointed learning rate
    "q8-feedback": (["--compression", "q8", "--error-feedback", "on"], {}),
    # warm-up spans both epochs: the resumed epoch recomputes it from (epoch, batch). A low
    # threshold, so that values cross it every step: with MXNet's 0.5 few do in 5 steps, and
    # the weights would hardly depend on the residuals.
    "twobit": (["--compression", "twobit", "--threshold", "0.01", "--warmup-epochs", "2"], {}),
    # Horovod's per-tensor path: the state is the compressor's, not the optimizer's
    "twobit-per-tensor": (["--compression", "twobit", "--threshold", "0.01"], {"HOROVOD_Q8_FUSED": "0"}),
}


def data_args() -> List[str]:
    return ["--data-dir", str(FASHION_MNIST)] if FASHION_MNIST.is_dir() else ["--synthetic"]


def train_cmd(ckpt: Path, out: Path, epochs: int, extra: List[str]) -> List[str]:
    return [sys.executable, "-m", "horovod_q8.workloads.train", "mnist", *data_args(),
            "--epochs", str(epochs), "--steps-per-epoch", "5", "--batch-size", "32",
            "--checkpoint-dir", str(ckpt), "--results-json", str(out), "--verbose", "0", *extra]


def train(ckpt: Path, out: Path, epochs: int, extra: List[str], env: Dict[str, str]) -> dict:
    """One 2-rank training under horovodrun; its summary (with 'stdout' added)."""
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", *train_cmd(ckpt, out, epochs, extra)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=dict(ENV, **env))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return dict(json.loads(out.read_text()), stdout=proc.stdout)


def swap_rank_states(ckpt: Path) -> None:
    states = ckpt / "compression_state"
    (states / "rank0-of-2").rename(states / "swap")
    (states / "rank1-of-2").rename(states / "rank0-of-2")
    (states / "swap").rename(states / "rank1-of-2")


@pytest.mark.parallel
@pytest.mark.parametrize("case", list(CASES))
def test_resume_is_bit_identical(case, tmp_path):
    extra, env = CASES[case]
    full = train(tmp_path / "full", tmp_path / "full.json", 2, extra, env)
    first = train(tmp_path / "resumed", tmp_path / "first.json", 1, extra, env)
    norms = [s["residual_norm"] for s in first["compression_state"]]
    assert first["error_feedback"] is True and all(n > 0 for n in norms), first["compression_state"]
    # Residuals are per rank: a checkpoint holding rank 0's for everyone would be wrong.
    assert first["compression_state"][0]["residual_sha1"] != first["compression_state"][1]["residual_sha1"]
    shutil.copytree(tmp_path / "resumed", tmp_path / "swapped")

    resumed = train(tmp_path / "resumed", tmp_path / "resumed.json", 2, extra, env)
    assert "at epoch 1" in resumed["stdout"] and resumed["initial_epoch"] == 1
    assert resumed["weights_sha1"] == full["weights_sha1"]
    assert resumed["compression_state"] == full["compression_state"]
    assert full["weights_sha1"] != first["weights_sha1"]

    swap_rank_states(tmp_path / "swapped")
    swapped = train(tmp_path / "swapped", tmp_path / "swapped.json", 2, extra, env)
    assert swapped["initial_epoch"] == 1 and swapped["weights_sha1"] != full["weights_sha1"], \
        "the restored residuals did not change the result: they are not what resumes"


def test_resume_with_other_ranks_is_refused(tmp_path):
    """Residuals written by 2 ranks cannot be split among 1: a clear error, no silent reset.
    The checkpoint is made here by hand in the layout train writes (1 process, no horovodrun)."""
    ckpt = tmp_path / "ckpt"
    script = f"""
import tensorflow as tf
from horovod_q8.tensorflow.state import CompressionState
state = CompressionState()
state.residual("q8.bucket0/residual", 4).assign([1.0, 2.0, 3.0, 4.0])
class Reducer(tf.Module):
    def __init__(self):
        self.state = state
class Optimizer(tf.Module):
    def __init__(self):
        self._allreduce_grads = Reducer()
epoch = tf.Variable(1, dtype=tf.int64)
tf.train.Checkpoint(optimizer=Optimizer(), epoch=epoch).write({str(ckpt / 'ckpt-1')!r})
tf.train.Checkpoint(state=state).write({str(ckpt / 'compression_state' / 'rank0-of-2' / 'ckpt-1')!r})
tf.train.Checkpoint(state=state).write({str(ckpt / 'compression_state' / 'rank1-of-2' / 'ckpt-1')!r})
"""
    made = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    assert made.returncode == 0, made.stderr[-3000:]
    (ckpt / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
    cmd = train_cmd(ckpt, tmp_path / "out.json", 2, ["--compression", "twobit"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "holds error-feedback residuals, which are per rank" in out and "rank0-of-1" in out, out[-3000:]


@pytest.mark.parallel
@pytest.mark.parametrize("path", ["fused", "per-tensor", "tape"])
def test_no_state_leaks_between_models(path, tmp_path):
    """Model B's weights after each of its steps are the same whether or not model A (equal
    architecture, names and settings) trained before it in the same process."""
    flag = {"per-tensor": ["--per-tensor"], "tape": ["--tape"]}.get(path, [])
    digests = {}
    for mode in ("alone", "after"):
        out = tmp_path / f"{mode}.json"
        assert_ok(*run(2, "state_checks.py", "leak", mode, str(out), *flag, timeout=TIMEOUT))
        digests[mode] = json.loads(out.read_text())
    assert set(digests["alone"]) == {"q8_feedback", "twobit", "q8_warmup"}
    for setting, alone in digests["alone"].items():
        assert digests["after"][setting] == alone, f"{setting}: B depends on A having trained"


def test_elastic_keras_state_carries_compression_state():
    proc = subprocess.run([sys.executable, str(HERE / "state_checks.py"), "elastic"], capture_output=True,
                          text=True, timeout=TIMEOUT, env=ENV)
    assert_ok(proc.returncode, proc.stdout + proc.stderr)


@pytest.mark.parallel
def test_elastic_sync_keeps_residuals_per_rank():
    assert_ok(*run(2, "state_checks.py", "elastic", timeout=TIMEOUT))


@pytest.mark.parametrize("argv, problem", [
    (["--compression", "fp16", "--error-feedback", "on"], "--error-feedback does not apply to --compression fp16"),
    (["--compression", "twobit", "--error-feedback", "off"], "its residual is part of the format"),
    (["--compression", "q8", "--error-feedback", "on"], None),
    (["--compression", "none"], None),
])
def test_error_feedback_flag(argv, problem):
    from horovod_q8.workloads import train as T

    args = T.build_parser().parse_args(["mnist", *argv])
    problems = T.check_args(args)
    assert (problem in "; ".join(problems)) if problem else problems == [], problems
    if problem is None and args.compression == "q8":
        assert T.compressor_options(args) == {"error_feedback": True}


def test_epoch_seeds_are_distinct():
    from horovod_q8.workloads.common import SEED_MAX, epoch_seed

    seeds = {epoch_seed(s, e) for s in (0, 1, SEED_MAX) for e in range(1000)}
    assert len(seeds) == 3000 and max(seeds) < 2 ** 53


@pytest.mark.parallel
def test_imagenet_folders_resume_is_bit_identical(tmp_path):
    """The JPEG pipeline draws each epoch's order and flips from (seed, epoch): resumed at
    epoch 1 it trains on what the uninterrupted run did."""
    sys.path.insert(0, str(Path(__file__).parent))
    import datagen

    data = datagen.imagenet_folders(tmp_path / "data")

    def imagenet(ckpt: Path, out: Path, epochs: int) -> dict:
        cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m",
               "horovod_q8.workloads.train", "imagenet", "--data-dir", str(data), "--compression", "q8",
               "--fused", "--error-feedback", "on", "--epochs", str(epochs), "--steps-per-epoch", "4",
               "--warmup-epochs", "0", "--batch-size", "8", "--image-size", "32", "--lr", "0.0001",
               "--checkpoint-dir", str(ckpt), "--results-json", str(out), "--verbose", "0"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
        return json.loads(out.read_text())

    full = imagenet(tmp_path / "full", tmp_path / "full.json", 2)
    first = imagenet(tmp_path / "resumed", tmp_path / "first.json", 1)
    resumed = imagenet(tmp_path / "resumed", tmp_path / "resumed.json", 2)
    assert resumed["initial_epoch"] == 1 and first["loss_per_epoch"][0] == full["loss_per_epoch"][0]
    assert resumed["weights_sha1"] == full["weights_sha1"] != first["weights_sha1"]
    assert resumed["compression_state"] == full["compression_state"]
