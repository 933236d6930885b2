"""What both trainers share: `horovod-q8 train`'s command line and its checks (run before a
framework is imported), epoch seeds, the weights' digest, the steady images/s and the SUMMARY
line. train.py (Keras) and torch_train.py (horovod.torch) import this; it imports neither."""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from horovod_q8.errors import UserError
from horovod_q8.formats import CODEBOOK, COMPRESSION_NAMES, get, names
from horovod_q8.workloads.datasets import IMAGENET_CLASSES, IMAGENET_SIZE

# What a training run may be given: every compression by name, and "auto".
TRAIN_COMPRESSIONS = (*COMPRESSION_NAMES, "auto")

DATASETS = ("mnist", "cifar10", "imagenet")
FRAMEWORKS = ("tensorflow", "torch")
DEFAULTS = {"mnist": dict(batch_size=64, lr=0.02, epochs=3),
            "cifar10": dict(batch_size=128, lr=0.05, epochs=30),
            "imagenet": dict(batch_size=64, lr=0.0125, epochs=90)}
HOROVOD_OWN = ("none", "fp16")
IMAGENET_MIN_SIZE = 32  # ResNet-50 takes no smaller input
ARCHITECTURES = ("mlp",)  # `--model`: instead of the dataset's own model
MLP_WIDTH = 4096  # 784-4096-4096-10: 20M parameters, 80 MB of float32 gradient a step
SEED_MAX = 2 ** 32 - 1  # numpy's and TensorFlow's seed range
EPOCH_STRIDE = 1_000_003  # epoch seeds: seed * stride + epoch stays below 2**53 for any seed
FEEDBACK = {"on": True, "off": False, "auto": None}

# (option, smallest value, why): numbers that mean nothing below their minimum.
MINIMUMS: Tuple[Tuple[str, float, str], ...] = (
    ("epochs", 1, "0 trains and evaluates nothing"),
    ("batch_size", 1, ""),
    ("steps_per_epoch", 1, "leave it out for whole epochs"),
    ("warmup_epochs", 0, ""),
    ("num_classes", 1, ""),
    ("image_size", 1, ""),
    ("mlp_width", 1, ""),
    ("pipeline_elements", 0, "0 sends every bucket whole"),
)

def build_parser(parser: Optional[argparse.ArgumentParser] = None,
                 description: Optional[str] = None) -> argparse.ArgumentParser:
    """`horovod-q8 train`'s options (both frameworks read the same command line)."""
    p = parser or argparse.ArgumentParser(prog="horovod-q8 train", description=description)
    p.add_argument("dataset", choices=DATASETS)
    p.add_argument("--framework", choices=FRAMEWORKS, default="tensorflow",
                   help="torch: horovod.torch (mnist only; workloads/torch_train.py)")
    p.add_argument("--compression", default="q8", choices=TRAIN_COMPRESSIONS,
                   help="auto: each bucket's format chosen from the measured link and codec (docs/auto.md)")
    p.add_argument("--model", choices=ARCHITECTURES, default=None,
                   help="instead of the dataset's own model: mlp = wide fully connected layers")
    p.add_argument("--mlp-width", type=int, default=None,
                   help=f"units per hidden layer of --model mlp (default {MLP_WIDTH})")
    p.add_argument("--fused", action="store_true", help="bucketed fast path (horovod_q8's optimizer)")
    p.add_argument("--block-size", type=int, default=None, help="elements per scale; 0 = whole tensor")
    p.add_argument("--threshold", type=float, default=None, help="twobit / q4_threshold top level")
    p.add_argument("--error-feedback", choices=tuple(FEEDBACK), default="auto",
                   help="keep what quantization dropped for the next step (auto: on for twobit "
                        "and q4_threshold, off for the codebook formats)")
    p.add_argument("--pipeline-elements", type=int, default=None,
                   help="send larger buckets as pieces of this many elements, so one piece's codec "
                        "overlaps another's transfer (default 0: whole)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch-size", type=int, help="per rank")
    p.add_argument("--lr", type=float, help="per rank; scaled by the number of ranks")
    p.add_argument("--warmup-epochs", type=int, default=1, help="LR warm-up (whole epochs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="dataset folder; default: Keras download")
    p.add_argument("--checkpoint-dir", default=None, help="checkpoints (rank 0) and resume")
    p.add_argument("--log-dir", default=None, help="TensorBoard logs (rank 0)")
    p.add_argument("--synthetic", action="store_true", help="random data of the dataset's shape")
    p.add_argument("--steps-per-epoch", type=int, default=None)
    p.add_argument("--num-classes", type=int, default=None,
                   help=f"ImageNet TFRecords and --synthetic only (default {IMAGENET_CLASSES}; folders give their own)")
    p.add_argument("--image-size", type=int, default=None, help=f"ImageNet input size (default {IMAGENET_SIZE})")
    p.add_argument("--results-json", default=None, help="rank 0 writes the summary here")
    p.add_argument("--verbose", type=int, default=1)
    return p


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def number_problems(args: argparse.Namespace, minimums: Sequence[Tuple[str, float, str]]) -> List[str]:
    """A line per number option (given, not None) that is non-finite or below its minimum,
    and for --lr (must be > 0) and --seed (0 to 2**32-1)."""
    out = []
    for dest, low, why in minimums:
        value = getattr(args, dest, None)
        if value is not None and (not math.isfinite(value) or value < low):
            out.append(f"{flag(dest)} must be >= {low}{f' ({why})' if why else ''}, got {value}")
    lr = getattr(args, "lr", None)
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        out.append(f"--lr must be a finite number > 0, got {lr}")
    seed = getattr(args, "seed", None)
    if seed is not None and not 0 <= seed <= SEED_MAX:
        out.append(f"--seed must be from 0 to {SEED_MAX}, got {seed}")
    return out


def compression_problems(compression: str, block_size: Optional[int],
                         threshold: Optional[float]) -> List[str]:
    """A line per compression option that does not apply to `compression` or has a bad value."""
    given = {"--block-size": block_size, "--threshold": threshold}
    if compression in HOROVOD_OWN:
        return [f"{flag} does not apply to --compression {compression} (Horovod's own)"
                for flag, value in given.items() if value is not None]
    if compression == "auto":  # it may choose none, fp16 or q8: a block size is q8's
        if threshold is not None:
            return ["--threshold does not apply to --compression auto (it chooses among none, fp16 and q8)"]
        compression = "q8"
    codebook = get(compression).kind == CODEBOOK
    wrong = "--threshold" if codebook else "--block-size"
    if given[wrong] is not None:
        others = [n for n in names() if (get(n).kind == CODEBOOK) != codebook]
        return [f"{wrong} does not apply to --compression {compression}; it applies to "
                f"{', '.join(others)}"]
    try:
        get(compression, block_size=block_size, threshold=threshold)
    except ValueError as e:
        return [str(e)]
    return []


def refuse(problems: List[str], parser: Callable[[], argparse.ArgumentParser]) -> None:
    """Exit 2 with argparse's usage line and every problem, before TensorFlow is imported."""
    if problems:
        parser().error("; ".join(problems))


def feedback_problems(compression: str, error_feedback: str) -> List[str]:
    """--error-feedback on/off means nothing for Horovod's own compressors, and off cannot be
    honoured by the threshold formats (their residual is part of the format)."""
    if compression in HOROVOD_OWN and error_feedback != "auto":
        return [f"--error-feedback does not apply to --compression {compression} (Horovod's own)"]
    if error_feedback == "off" and compression not in (*HOROVOD_OWN, "auto") and get(compression).uses_residual:
        return [f"--error-feedback off does not apply to --compression {compression}: its residual "
                f"is part of the format (it always keeps one)"]
    return []


def check_args(args: argparse.Namespace) -> List[str]:
    """Everything wrong with `horovod-q8 train`'s arguments (empty when they make sense)."""
    return (number_problems(args, MINIMUMS)
            + compression_problems(args.compression, args.block_size, args.threshold)
            + feedback_problems(args.compression, getattr(args, "error_feedback", "auto"))
            + model_problems(args) + data_problems(args) + output_problems(args))


def data_problems(args: argparse.Namespace) -> List[str]:
    """Options the chosen data would ignore, and an ImageNet input smaller than its model takes."""
    problems = []
    imagenet = getattr(args, "dataset", None) == "imagenet"
    for dest in ("num_classes", "image_size"):
        if getattr(args, dest, None) is not None and not imagenet:
            problems.append(f"{flag(dest)} applies to imagenet only ({args.dataset} has its own)")
    size = getattr(args, "image_size", None)
    if imagenet and size is not None and size < IMAGENET_MIN_SIZE:
        problems.append(f"--image-size must be >= {IMAGENET_MIN_SIZE} (ResNet-50's smallest input), got {size}")
    if getattr(args, "synthetic", False) and getattr(args, "data_dir", None) is not None:
        problems.append("--data-dir does not apply to --synthetic (random data of the dataset's shape)")
    return problems


def output_problems(args: argparse.Namespace) -> List[str]:
    """Output paths that could not be written, found before the training time is spent."""
    problems = []
    for dest, kind in (("checkpoint_dir", "folder"), ("log_dir", "folder"), ("results_json", "file")):
        value = getattr(args, dest, None)
        if value is None:
            continue
        path = Path(value)
        if path.exists() and (path.is_dir() != (kind == "folder")):
            problems.append(f"{flag(dest)} {value} is a {'folder' if path.is_dir() else 'file'}; give a {kind}")
            continue
        parent = next((p for p in [path, *path.parents] if p.exists()), None)
        if parent is not None and path != parent and not parent.is_dir():
            problems.append(f"{flag(dest)} {value}: {parent} is a file, so the {kind} cannot be made")
        elif parent is not None:
            refused = _cannot_create_in(parent)
            if refused:
                problems.append(f"{flag(dest)} {value}: nothing can be made in {parent} ({refused})")
    return problems


def _cannot_create_in(folder: Path) -> Optional[str]:
    """Why a file cannot be made in `folder`, found by making one (and removing it): os.access
    says yes to root everywhere, even in /proc or on a read-only mount."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".horovod_q8_write_check_")
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    os.remove(name)
    return None


def model_problems(args: argparse.Namespace) -> List[str]:
    problems = []
    if getattr(args, "mlp_width", None) is not None and getattr(args, "model", None) != "mlp":
        problems.append("--mlp-width applies only to --model mlp")
    if getattr(args, "pipeline_elements", None) is not None and args.compression in HOROVOD_OWN:
        problems.append(f"--pipeline-elements does not apply to --compression {args.compression} "
                        "(Horovod's own)")
    return problems



def epoch_seed(seed: int, epoch):
    """The seed of epoch `epoch` (an int or an int64 tensor): distinct for every (seed, epoch)."""
    return seed * EPOCH_STRIDE + epoch



def weights_sha1(weights) -> str:
    """sha1 of the dtype, shape and bytes of every array, in order."""
    h = hashlib.sha1()
    for w in weights:
        a = w.numpy() if hasattr(w, "numpy") else w
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()



def steady_rate(epochs: Sequence[Sequence[float]], images_per_step: int, skip: int = 2) -> float:
    """Images/s over the batches after the run's first `skip` (graph tracing, warm-up), from
    the batch end times of each epoch. Only intervals inside an epoch count: the time between
    epochs (validation, callbacks) is not a training step, and it would add the same time to
    every compression's steps and pull their ratios towards 1."""
    steps, seconds, seen = 0, 0.0, 0
    for ends in epochs:
        for k in range(1, len(ends)):
            if seen + k > skip:
                steps += 1
                seconds += ends[k] - ends[k - 1]
        seen += len(ends)
    return steps * images_per_step / seconds if seconds > 0 else 0.0



def compressor_options(args: argparse.Namespace) -> dict:
    """compressor(...)'s keyword arguments from --block-size, --threshold, --error-feedback."""
    options = {"block_size": args.block_size} if args.block_size is not None else {}
    if args.threshold is not None:
        options["threshold"] = args.threshold
    if getattr(args, "pipeline_elements", None) is not None:
        options["pipeline_elements"] = args.pipeline_elements
    feedback = FEEDBACK[getattr(args, "error_feedback", "auto")]
    if feedback is not None:
        options["error_feedback"] = feedback
    return options


# Options that may differ by rank: paths on each node, and how much a rank prints.
PER_RANK = ("data_dir", "checkpoint_dir", "log_dir", "results_json", "verbose")


class RanksDisagree(UserError):
    """The ranks were started with different training options."""


def run_settings(args: argparse.Namespace, steps: int, classes: int) -> dict:
    """What every rank must agree on: each option but PER_RANK's, and what its data gave (steps
    per epoch, classes). Ranks with other epochs or steps would wait for each other's collectives
    forever; with another --lr they would train different models."""
    out = {flag(k): v for k, v in sorted(vars(args).items())
           if k not in PER_RANK and k != "command" and not callable(v)}
    out.update({"steps per epoch (from the data)": steps, "classes (from the data)": classes})
    return out


def check_ranks_agree(everyone: Sequence[dict]) -> None:
    """Raise RanksDisagree naming each setting that differs, with every rank's value
    (`everyone`: run_settings of every rank, in rank order, from an allgather)."""
    lines = []
    for key in sorted(set().union(*everyone)):
        values = [e.get(key) for e in everyone]
        if any(v != values[0] for v in values[1:]):
            lines.append(f"{key} ({', '.join(f'rank {r}: {v!r}' for r, v in enumerate(values))})")
    if lines:
        raise RanksDisagree("the ranks were started with different settings, so they would wait for each "
                            "other forever or train different models: " + "; ".join(lines)
                            + ". Start every rank with the same options (only " + ", ".join(map(flag, PER_RANK))
                            + " may differ) and, where it differs, the same data")


def whole_steps(batch_size: int, ranks: int, images: int) -> int:
    """Steps per epoch when --steps-per-epoch is not given: whole global batches of this many
    training images; refused when not one fits (an epoch of no step would never end)."""
    steps = images // (batch_size * ranks)
    if steps == 0:
        raise UserError(f"--batch-size {batch_size} on {ranks} rank(s) takes {batch_size * ranks} images a step, "
                        f"more than the {images} training images: lower --batch-size, or give --steps-per-epoch "
                        "(batches then run on into the next pass)")
    return steps


def publish_summary(summary: dict, line: str, results_json: Optional[str]) -> None:
    """Rank 0's ending: the SUMMARY line on stdout, the whole summary as JSON if asked."""
    print(f"SUMMARY {line}", flush=True)
    if results_json:
        Path(results_json).parent.mkdir(parents=True, exist_ok=True)
        Path(results_json).write_text(json.dumps(summary, indent=1))


def horovodrun() -> str:
    """This interpreter's horovodrun (the venv's), else the one on PATH."""
    here = Path(sys.executable).parent / "horovodrun"
    return str(here) if here.exists() else (shutil.which("horovodrun") or "horovodrun")
