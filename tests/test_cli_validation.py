"""The command line refuses meaningless options (issue 15) with exit code 2 and a clear
message, before TensorFlow or Horovod is imported."""
from __future__ import annotations

import re

import pytest

from conftest import cli, poisoned_env
from horovod_q8.workloads import compare, hybrid, train



def train_problems(*argv: str) -> list:
    return train.check_args(train.build_parser().parse_args(["mnist", *argv]))


@pytest.mark.parametrize("argv,message", [
    (["--compression", "none", "--block-size", "-5"], "--block-size does not apply to --compression none"),
    (["--compression", "fp16", "--threshold", "-3"], "--threshold does not apply to --compression fp16"),
    (["--compression", "auto", "--threshold", "0.1"], "--threshold does not apply to --compression auto"),
    (["--compression", "auto", "--block-size", "-1"], "block_size .* must be an int >= 0, got -1"),
    (["--compression", "none", "--block-size", "64"], "--block-size does not apply"),
    (["--compression", "q8", "--threshold", "0.1"],
     "--threshold does not apply to --compression q8; it applies to twobit, q4_threshold"),
    (["--compression", "twobit", "--block-size", "64"],
     "--block-size does not apply to --compression twobit; it applies to q8"),
    (["--compression", "q8", "--block-size", "-5"], "block_size .* must be an int >= 0, got -5"),
    (["--compression", "q8", "--block-size", "4"], "2 bytes per element.*block_size >= 5"),
    (["--compression", "q4", "--block-size", "1"], "4.5 bytes per element.*block_size >= 3"),
    (["--compression", "twobit", "--threshold", "inf"], "threshold must be a finite number > 0, got inf"),
    (["--compression", "twobit", "--threshold", "nan"], "threshold must be a finite number > 0, got nan"),
    (["--compression", "q4_threshold", "--threshold", "-1"], "threshold must be a finite number > 0"),
    (["--epochs", "-1"], r"--epochs must be >= 1 \(0 trains and evaluates nothing\), got -1"),
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--steps-per-epoch", "0"], "--steps-per-epoch must be >= 1"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--lr", "0"], "--lr must be a finite number > 0, got 0"),
    (["--lr", "-0.1"], "--lr must be a finite number > 0"),
    (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["--warmup-epochs", "-1"], "--warmup-epochs must be >= 0"),
    (["--seed", "-1"], "--seed must be from 0 to 4294967295"),
    (["--image-size", "64"], "--image-size applies to imagenet only \\(mnist has its own\\)"),
    (["--num-classes", "10"], "--num-classes applies to imagenet only"),
    (["--synthetic", "--data-dir", "/data"], "--data-dir does not apply to --synthetic"),
    (["--results-json", "/proc/version/out.json"], "/proc/version is a file, so the file cannot be made"),
    (["--results-json", "/proc/nope/out.json"], r"nothing can be made in /proc \("),  # root too: made, not asked
    (["--checkpoint-dir", "/proc/sys/ckpt"], r"nothing can be made in /proc/sys \("),
    (["--model", "mlp", "--mlp-width", "0"], "--mlp-width must be >= 1"),
    (["--mlp-width", "512"], "--mlp-width applies only to --model mlp"),
    (["--pipeline-elements", "-1"], "--pipeline-elements must be >= 0"),
    (["--compression", "fp16", "--pipeline-elements", "4"], "--pipeline-elements does not apply to --compression fp16"),
])
def test_train_refuses(argv, message):
    problems = train_problems(*argv)
    assert len(problems) == 1
    assert re.search(message, problems[0]), problems


@pytest.mark.parametrize("argv", [
    [], ["--compression", "none"], ["--compression", "fp16"], ["--compression", "q8", "--block-size", "0"],
    ["--compression", "q8", "--block-size", "5"], ["--compression", "q4", "--block-size", "3"],
    ["--compression", "twobit", "--threshold", "0.1"],
    ["--compression", "q4_threshold", "--threshold", "0.05"],
    ["--compression", "auto"], ["--compression", "auto", "--block-size", "256", "--error-feedback", "on"],
    ["--epochs", "1", "--steps-per-epoch", "1", "--batch-size", "1", "--lr", "1e-4", "--warmup-epochs", "0"],
    ["--model", "mlp"], ["--model", "mlp", "--mlp-width", "512"], ["--pipeline-elements", "4194304"],
])
def test_train_accepts_meaningful_options(argv):
    assert train_problems(*argv) == []


def test_every_problem_is_reported_at_once():
    problems = train_problems("--epochs", "0", "--batch-size", "0",
                              "--compression", "none", "--threshold", "1")
    assert len(problems) == 3


def test_run_exits_2_before_training(capsys):
    args = train.build_parser().parse_args(["mnist", "--epochs", "-1"])
    with pytest.raises(SystemExit) as exit_:
        train.run(args)
    assert exit_.value.code == 2
    assert "horovod-q8 train: error: --epochs must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--steps-per-epoch", "0"], "--steps-per-epoch must be >= 1"),
    (["--batch-size", "-2"], "--batch-size must be >= 1"),
    (["--lr", "inf"], "--lr must be a finite number > 0"),
    (["--warmup-epochs", "nan"], "--warmup-epochs must be >= 0"),
    (["--fc-units", "0"], "--fc-units must be >= 1"),
])
def test_hybrid_refuses(argv, message):
    problems = hybrid.check_args(hybrid.build_parser().parse_args(argv))
    assert len(problems) == 1 and message in problems[0], problems


def test_hybrid_accepts_its_defaults():
    assert hybrid.check_args(hybrid.build_parser().parse_args([])) == []


@pytest.mark.parametrize("argv,message", [
    (["--epochs", "-1"], "--epochs must be >= 1"),
    (["--np", "1"], "--np must be >= 2"),
    (["--compressions", "q8,q9"], "--compressions: unknown 'q9'"),
    (["--compressions", "q8,"], "--compressions: unknown ''"),
    (["--compressions", "q8,q8"], "--compressions names one twice"),
    (["--dataset", "imagenet"], "--dataset imagenet needs --data-dir"),
    (["--dataset", "cifar10", "--framework", "torch"], "--framework torch trains mnist only"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
])
def test_compare_refuses(argv, message):
    problems = compare.check_args(compare.build_parser().parse_args(argv))
    assert len(problems) == 1 and message in problems[0], problems


def test_compare_accepts_its_defaults():
    assert compare.check_args(compare.build_parser().parse_args([])) == []
    args = compare.build_parser().parse_args(["--dataset", "cifar10", "--data-dir", "/d", "--steps-per-epoch", "5"])
    assert compare.check_args(args) == []


# --- through the real entry point, with TensorFlow and Horovod made unimportable ------------

@pytest.fixture
def no_tensorflow(tmp_path):
    """An environment in which importing tensorflow or horovod fails loudly."""
    return poisoned_env(tmp_path, ("tensorflow", "horovod"))


@pytest.mark.parametrize("argv,message", [
    (["train", "mnist", "--compression", "none", "--block-size", "-5"], "--block-size does not apply"),
    (["train", "mnist", "--compression", "fp16", "--threshold", "-3"], "--threshold does not apply"),
    (["train", "mnist", "--epochs", "-1"], "--epochs must be >= 1"),
    (["train", "mnist", "--steps-per-epoch", "0"], "--steps-per-epoch must be >= 1"),
    (["hybrid", "--epochs", "0"], "--epochs must be >= 1"),
    (["compare", "--np", "1"], "--np must be >= 2"),
])
def test_cli_refuses_with_exit_2_before_importing_tensorflow(no_tensorflow, argv, message):
    proc = cli(no_tensorflow, *argv)
    assert proc.returncode == 2, proc.stderr
    assert f"horovod-q8 {argv[0]}: error: {message}" in proc.stderr
    assert "poisoned" not in proc.stderr


def test_the_poison_works(no_tensorflow):
    """Control: good options reach the TensorFlow import, so the checks above ran before it."""
    proc = cli(no_tensorflow, "train", "mnist", "--synthetic", "--epochs", "1")
    assert proc.returncode not in (0, 2) and "poisoned: horovod imported" in proc.stderr


@pytest.mark.parametrize("dataset,inputs", [("mnist", 784), ("cifar10", 3072)])
def test_model_mlp_is_the_wide_fully_connected_network(dataset, inputs):
    args = train.build_parser().parse_args([dataset, "--model", "mlp", "--mlp-width", "64"])
    model = train.build_model(args, 10)
    assert [w.shape.as_list() for w in model.trainable_weights] == [
        [inputs, 64], [64], [64, 64], [64], [64, 10], [10]]
    default = train.build_model(train.build_parser().parse_args([dataset]), 10)
    assert default.name != "mlp"


def test_imagenet_input_sizes():
    problems = lambda *a: train.check_args(train.build_parser().parse_args(["imagenet", *a]))  # noqa: E731
    assert problems("--image-size", "16") == ["--image-size must be >= 32 (ResNet-50's smallest input), got 16"]
    assert problems("--image-size", "32", "--num-classes", "5") == []
