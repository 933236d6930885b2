"""A user's mistake is one sentence, never a traceback: damaged checkpoints (written by
TensorFlow's own checkpoint writer and by a real training run, then cut short or corrupted)
name the file and say what to do; dataset errors from the real CLI are one line on stderr,
exit 1."""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from conftest import ROOT

import datagen

tf = pytest.importorskip("tensorflow")

from horovod_q8.workloads import checkpoint_errors as ce  # noqa: E402

WHAT_TO_DO = "start a new --checkpoint-dir"


def write_checkpoint(folder: Path, units: int = 1000) -> str:
    """A two-variable checkpoint by TensorFlow's CheckpointManager; its prefix."""
    ckpt = tf.train.Checkpoint(w=tf.Variable(tf.range(units, dtype=tf.float32)), epoch=tf.Variable(3, dtype=tf.int64))
    return tf.train.CheckpointManager(ckpt, str(folder), max_to_keep=3).save(checkpoint_number=3)


def restore_as_training_does(folder: Path, units: int = 1000) -> int:
    """train.py's order: the folder, the latest checkpoint, every tensor read, the restore."""
    ckpt = tf.train.Checkpoint(w=tf.Variable(tf.zeros(units)), epoch=tf.Variable(0, dtype=tf.int64))
    ce.check_folder(str(folder))
    latest = tf.train.CheckpointManager(ckpt, str(folder), max_to_keep=3).latest_checkpoint
    ce.verify(latest)
    with ce.reading(latest):
        ckpt.restore(latest)
    return int(ckpt.epoch.numpy())


def cut(path: Path, keep: Callable[[int], int]) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:keep(len(data))])


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


DATA, INDEX = "ckpt-3.data-00000-of-00001", "ckpt-3.index"
CASES = [
    ("data cut in half", lambda d: cut(d / DATA, lambda n: n // 2), DATA, "is shorter than its index says"),
    ("data emptied", lambda d: cut(d / DATA, lambda n: 0), DATA, "is shorter than its index says"),
    ("data byte flipped", lambda d: flip(d / DATA, 100), DATA, "do not match the checksum"),
    ("data missing", lambda d: (d / DATA).unlink(), DATA, "is missing"),
    ("index cut to 10 bytes", lambda d: cut(d / INDEX, lambda n: 10), INDEX, "cut short or corrupt"),
    ("index cut in half", lambda d: cut(d / INDEX, lambda n: n // 2), INDEX, "cut short or corrupt"),
    ("index byte flipped", lambda d: flip(d / INDEX, 20), INDEX, "cut short or corrupt"),
    ("index missing", lambda d: (d / INDEX).unlink(), INDEX, "is missing"),
    ("state file garbage", lambda d: (d / "checkpoint").write_text("garbage{{{"), "checkpoint", "cannot be read"),
    ("state file empty", lambda d: (d / "checkpoint").write_text(""), "checkpoint", "cannot be read"),
    ("state file missing", lambda d: (d / "checkpoint").unlink(), "", "holds ckpt-3 but no checkpoint file"),
]


def test_an_intact_checkpoint_restores(tmp_path):
    write_checkpoint(tmp_path)
    assert restore_as_training_does(tmp_path) == 3


@pytest.mark.parametrize("case,damage,file,what", CASES, ids=[c[0] for c in CASES])
def test_a_damaged_checkpoint_names_its_file(case, damage, file, what, tmp_path):
    write_checkpoint(tmp_path)
    damage(tmp_path)
    with pytest.raises(ce.CheckpointError) as err:
        restore_as_training_does(tmp_path)
    message = str(err.value)
    assert str(tmp_path / file) in message and what in message and WHAT_TO_DO in message, message
    assert "\n" not in message


def test_a_checkpoint_of_another_model_says_so(tmp_path):
    write_checkpoint(tmp_path, units=1000)
    with pytest.raises(ce.CheckpointError, match="does not fit this model and setting"):
        restore_as_training_does(tmp_path, units=10)


ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
TRAIN = ["train", "mnist", "--synthetic", "--steps-per-epoch", "2", "--verbose", "0", "--compression", "q8"]


def cli(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "horovod_q8.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=ENV)


def one_sentence(proc: subprocess.CompletedProcess, command: str) -> str:
    """The command's one error line (TensorFlow's start-up log lines aside); no traceback."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith(f"horovod-q8 {command}: ")]
    assert len(ours) == 1, proc.stderr
    return ours[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A --checkpoint-dir written by a real 1-epoch training run (one process)."""
    folder = tmp_path_factory.mktemp("ckpt")
    proc = cli(*TRAIN, "--epochs", "1", "--checkpoint-dir", str(folder))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert (folder / "ckpt-1.index").exists(), sorted(p.name for p in folder.iterdir())
    return folder


@pytest.mark.parametrize("damaged,what", [("ckpt-1.data-00000-of-00001", "is shorter than its index says"),
                                           ("ckpt-1.index", "cut short or corrupt")])
def test_resuming_from_a_truncated_checkpoint_is_one_sentence(trained, damaged, what, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(trained, folder)
    cut(folder / damaged, lambda n: n // 2)
    proc = cli(*TRAIN, "--epochs", "2", "--checkpoint-dir", str(folder))
    line = one_sentence(proc, "train")
    assert str(folder / damaged) in line and what in line and WHAT_TO_DO in line, line


@pytest.mark.parallel
def test_two_ranks_stop_together_on_a_damaged_checkpoint(trained, tmp_path):
    """Both ranks read the cut-short file; each says so in one line, and neither waits for the other."""
    from test_parallel import horovodrun

    folder = tmp_path / "ckpt"
    shutil.copytree(trained, folder)
    cut(folder / "ckpt-1.data-00000-of-00001", lambda n: n // 3)
    cmd = [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m", "horovod_q8.cli",
           *TRAIN, "--epochs", "2", "--checkpoint-dir", str(folder)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=ENV)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    # horovodrun adds a traceback of its own when a rank exits with 1; the ranks print none
    ranks = [line for line in out.splitlines() if line.startswith(("[0]<", "[1]<"))]
    assert not [line for line in ranks if "Traceback" in line], out[-4000:]
    for rank in (0, 1):
        assert f"[{rank}]<stderr>:horovod-q8 train: checkpoint {folder}/ckpt-1 cannot be restored" in out, out[-4000:]


def mnist_dir(tmp_path: Path) -> Path:
    return datagen.mnist(tmp_path / "mnist", n_train=64, n_test=16, gz=True)


@pytest.mark.parametrize("case", ["missing", "empty", "truncated gz"])
@pytest.mark.parametrize("framework", ["tensorflow", "torch"])
def test_dataset_errors_are_one_line_exit_1(case, framework, tmp_path):
    if framework == "torch":
        pytest.importorskip("horovod.torch")
    if case == "missing":
        data, expect = tmp_path / "nonexistent", "does not exist"
    elif case == "empty":
        data, expect = tmp_path / "empty", "expected train-images-idx3-ubyte[.gz]"
        data.mkdir()
    else:
        data = mnist_dir(tmp_path)
        images = data / "train-images-idx3-ubyte.gz"
        cut(images, lambda n: n - 40)
        with pytest.raises(EOFError):  # really cut short
            gzip.decompress(images.read_bytes())
        expect = f"{images} is truncated"
    proc = cli("train", "mnist", "--framework", framework, "--data-dir", str(data), "--epochs", "1",
               "--verbose", "0", timeout=300)
    line = one_sentence(proc, "train")
    assert expect in line, line


def test_launch_errors_stay_exit_2_and_one_line():
    proc = cli("launch", "hostfile", "--hosts", "a,b", "--gpus-per-node", "1", "--iface", "eth0", "--dry-run")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "horovod-q8 launch: --iface has no place in hostfile, it would be dropped (templates that take it: "
        "horovodrun_gloo.sh, horovodrun_mpi.sh, mpirun_ompi4_ib.sh, mpirun_ompi5_ucx.sh, slurm_srun.sbatch, "
        "slurm_mpirun.sbatch)"]


def test_an_unexpected_error_keeps_its_traceback(tmp_path):
    """Only user errors lose their traceback: a bug still shows where it is."""
    from horovod_q8 import cli as cli_module

    assert cli_module.is_user_error(ce.CheckpointError("x"))
    assert not cli_module.is_user_error(IndexError("Read less bytes than requested"))
    assert not cli_module.is_user_error(RuntimeError("bug"))


MIXED_THRESHOLDS = """
import horovod.tensorflow as hvd, tensorflow as tf
from horovod_q8.tensorflow import DistributedGradientTape, compressor
from horovod_q8.tensorflow.compressor import ScaledThresholdsError
hvd.init()
tf.keras.mixed_precision.set_global_policy("mixed_float16")
w = tf.Variable(tf.ones(5000))
for name, comp in [(n, compressor(n)) for n in ("twobit", "q4_threshold", "q4")] + [
        ("auto+twobit", compressor("auto", allow=("none", "twobit"))), ("auto", compressor("auto"))]:
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w)
    try:
        DistributedGradientTape(tape, compression=comp).gradient(loss, [w])
        print(name, "ran")
    except ScaledThresholdsError as e:
        print(name, "refused:", e)
"""


def test_threshold_formats_are_refused_under_loss_scaling():
    """mixed_float16's loss scale (up to 2**15) would saturate the threshold formats' fixed
    levels (twobit's largest update fell from 5.0e-2 to 6.1e-6); q8 and q4 scale per block."""
    out = subprocess.run([sys.executable, "-c", MIXED_THRESHOLDS], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "twobit refused: horovod_q8: twobit sends fixed levels" in out.stdout
    assert "q4_threshold refused:" in out.stdout and "q4 ran" in out.stdout, out.stdout
    # Auto that may choose a threshold format: refused whether or not this link would choose it
    assert "auto+twobit refused: horovod_q8: Auto may choose twobit" in out.stdout, out.stdout
    assert "auto ran" in out.stdout, out.stdout
