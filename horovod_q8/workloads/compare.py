"""`horovod-q8 compare`: the main job. One 2-process Horovod training per compression on real
data (MNIST when it can be downloaded, else Fashion-MNIST offline; or --dataset cifar10 /
imagenet with their --data-dir), then one table."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

from horovod_q8.workloads.datasets import FASHION_MNIST_DIR
from horovod_q8.workloads.common import DATASETS, TRAIN_COMPRESSIONS, horovodrun, number_problems, refuse

MINIMUMS = (("np", 2, "one process sends nothing, so every compression would look alike"),
            ("epochs", 1, "0 trains and evaluates nothing"), ("batch_size", 1, ""), ("steps_per_epoch", 1, ""))


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 compare", description=__doc__)
    p.add_argument("--dataset", choices=DATASETS, default="mnist")
    p.add_argument("--compressions", default="none,fp16,q8,q4,auto")
    p.add_argument("--np", type=int, default=2, help="processes (localhost, Gloo)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="auto",
                   help="the dataset's folder; 'auto': for mnist Keras' MNIST if downloadable, else "
                        "Fashion-MNIST; for cifar10 Keras' download")
    p.add_argument("--batch-size", type=int, default=None, help="per rank (train's default for the dataset)")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="default: whole epochs")
    p.add_argument("--stock", action="store_true", help="hvd.DistributedOptimizer instead of the fused path")
    p.add_argument("--framework", choices=("tensorflow", "torch"), default="tensorflow",
                   help="torch: `train --framework torch` (hvd.DistributedOptimizer, which builds "
                        "horovod_q8's fused optimizer for our formats)")
    p.add_argument("--out", default=None, help="folder for the per-run JSON summaries")
    return p


def check_args(args: argparse.Namespace) -> List[str]:
    """Everything wrong with `horovod-q8 compare`'s arguments (empty when they make sense)."""
    problems = number_problems(args, MINIMUMS)
    chosen = args.compressions.split(",")
    unknown = [n for n in chosen if n not in TRAIN_COMPRESSIONS]
    if unknown:
        problems.append(f"--compressions: unknown {', '.join(map(repr, unknown))}; "
                        f"choose from {', '.join(TRAIN_COMPRESSIONS)}")
    elif len(set(chosen)) < len(chosen):
        problems.append(f"--compressions names one twice: {args.compressions}")
    if args.dataset == "imagenet" and args.data_dir == "auto":
        problems.append("--dataset imagenet needs --data-dir (JPEG folders or TFRecords)")
    if args.framework == "torch" and args.dataset != "mnist":
        problems.append("--framework torch trains mnist only")
    return problems


def _mnist_downloadable() -> bool:
    code = "import tensorflow as tf; tf.keras.datasets.mnist.load_data()"
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def run(args: argparse.Namespace) -> int:
    refuse(check_args(args), build_parser)
    from horovod_q8.bench.common import machine, markdown

    data_dir: Optional[str] = args.data_dir
    dataset = f"{args.dataset} from {data_dir}"
    if data_dir == "auto" and args.dataset != "mnist":
        data_dir, dataset = None, f"{args.dataset} (Keras download)"
    elif data_dir == "auto":
        if _mnist_downloadable():
            data_dir, dataset = None, "MNIST (Keras download)"
        else:
            data_dir, dataset = FASHION_MNIST_DIR, f"Fashion-MNIST ({FASHION_MNIST_DIR}, offline)"
    out = Path(args.out or tempfile.mkdtemp(prefix="horovod_q8_compare_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"# horovod-q8 compare: {args.np} processes, {dataset}, {args.epochs} epochs, "
          f"{'stock' if args.stock else 'fused'} optimizer, {args.framework}\n# {machine()}", flush=True)
    results = []
    for name in args.compressions.split(","):
        summary = out / f"{name}.json"
        cmd = [horovodrun(), "-np", str(args.np), "-H", f"localhost:{args.np}", "--gloo",
               sys.executable, "-m", "horovod_q8.cli", "train", args.dataset, "--compression", name,
               "--epochs", str(args.epochs), "--seed", str(args.seed), "--verbose", "2",
               "--results-json", str(summary)]
        cmd += [] if data_dir is None else ["--data-dir", data_dir]
        for option in ("batch_size", "steps_per_epoch"):
            if getattr(args, option) is not None:
                cmd += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
        if args.framework == "torch":
            cmd += ["--framework", "torch"]
        elif not args.stock:
            cmd += ["--fused"]
        print(f"\n$ {' '.join(cmd)}", flush=True)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout.splitlines():
            if line.startswith("[0]<stdout>:"):
                print("  " + line[len("[0]<stdout>:"):], flush=True)
        if proc.returncode != 0 or not summary.exists():
            print(proc.stdout[-4000:], file=sys.stderr)
            print(f"training with {name} failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        results.append(json.loads(summary.read_text()))
    base = next((r for r in results if r["compression"] == "none"), results[0])
    rows = [[r["compression"], f"{100 * r['test_accuracy']:.2f}", f"{r['wall_s']:.1f}",
             f"{r['images_per_s']:.0f}", f"{r['bytes_per_step'] / 1e3:.1f}",
             f"{base['bytes_per_step'] / r['bytes_per_step']:.1f}x"] for r in results]
    print("\n" + markdown(["compression", "test accuracy %", "wall s", "images/s",
                           "kB sent/rank/step", "fewer bytes than fp32"], rows), flush=True)
    return 0


def main(argv: Optional[List[str]] = None) -> None:
    sys.exit(run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
