"""`horovod-q8 bench training`: training throughput per compression, side by side in one run.

Each compression trains the same model and batch (`horovod-q8 train`, `--synthetic` by
default) on 2 ranks: on loopback (horovodrun, Gloo) or on emulated hosts (`horovod-q8
cluster`, one rank per host, shaped links). A run of one rank, which sends nothing, gives the
compute time, so the table also says how much of fp32's step is communication.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from horovod_q8.cores import share, usable_cores
from horovod_q8.workloads.common import (ARCHITECTURES, DATASETS, HOROVOD_OWN, TRAIN_COMPRESSIONS, horovodrun,
                                         number_problems, refuse)

MINIMUMS = (("ranks", 2, "one rank sends nothing"), ("batch_size", 1, ""), ("steps_per_epoch", 3, ""),
            ("epochs", 1, ""), ("pipeline_elements", 0, "0 sends every bucket whole"))


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench training", description=__doc__)
    p.add_argument("dataset", nargs="?", default="mnist", choices=DATASETS)
    p.add_argument("--model", choices=ARCHITECTURES, default="mlp")
    p.add_argument("--mlp-width", type=int, default=None)
    p.add_argument("--compressions", default="none,fp16,q8,q4")
    p.add_argument("--ranks", type=int, default=2, help="processes (one per emulated host)")
    p.add_argument("--hosts", action="store_true",
                   help="one rank per emulated host (`horovod-q8 cluster`, needs root) instead of loopback")
    p.add_argument("--bandwidth", default="1gbit", help="with --hosts: each host's link")
    p.add_argument("--pin-cores", action="store_true", help="with --hosts: each host on cores of its own")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--epochs", type=int, default=2, help="images/s is taken after the first 2 batches")
    p.add_argument("--pipeline-elements", type=int, default=None, help="passed to train for q-formats")
    p.add_argument("--real-data", action="store_true", help="the dataset's files instead of --synthetic")
    p.add_argument("--data-dir", default=None, help="with --real-data: the dataset's folder (train's --data-dir)")
    p.add_argument("--stock", action="store_true",
                   help="no --fused: hvd.DistributedOptimizer(opt, compression=...) as users write it")
    p.add_argument("--no-compute-run", action="store_true", help="skip the one-rank compute-only run")
    p.add_argument("--timeout", type=float, default=1800)
    return p


def check_args(args: argparse.Namespace) -> List[str]:
    problems = number_problems(args, MINIMUMS)
    unknown = [n for n in args.compressions.split(",") if n not in TRAIN_COMPRESSIONS]
    if unknown:
        problems.append(f"--compressions: unknown {', '.join(map(repr, unknown))}; choose from "
                        f"{', '.join(TRAIN_COMPRESSIONS)}")
    if args.data_dir is not None and not args.real_data:
        problems.append("--data-dir applies with --real-data (else the data is synthetic)")
    return problems


def train_command(args: argparse.Namespace, compression: str, summary: Path) -> List[str]:
    cmd = ["horovod-q8", "train", args.dataset, "--model", args.model, "--compression", compression,
           "--batch-size", str(args.batch_size), "--steps-per-epoch", str(args.steps_per_epoch),
           "--epochs", str(args.epochs), "--warmup-epochs", "0", "--verbose", "0",
           "--results-json", str(summary)]
    cmd += [] if args.mlp_width is None else ["--mlp-width", str(args.mlp_width)]
    if args.pipeline_elements is not None and compression not in HOROVOD_OWN:
        cmd += ["--pipeline-elements", str(args.pipeline_elements)]
    cmd += (["--data-dir", args.data_dir] if args.data_dir else []) if args.real_data else ["--synthetic"]
    cmd += [] if args.stock or compression in HOROVOD_OWN else ["--fused"]
    return cmd


def launch(args: argparse.Namespace, ranks: int, job: List[str]) -> List[str]:
    bin_dir = Path(sys.executable).parent
    job = [str(bin_dir / job[0]) if (bin_dir / job[0]).exists() else job[0], *job[1:]]
    if args.hosts and ranks > 1:
        return [sys.executable, "-m", "horovod_q8.cli", "cluster", "--hosts", str(ranks),
                "--bandwidth", args.bandwidth, "--timeout", str(args.timeout),
                *(["--pin-cores"] if args.pin_cores else []), "--", *job]
    return [horovodrun(), "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo", *job]


def cpu_ticks() -> List[int]:
    """(busy, total) clock ticks of the whole machine so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return [sum(fields) - idle, sum(fields)]


def cores_per_rank(args: argparse.Namespace) -> int:
    return share(args.ranks)


def compute_only_prefix(args: argparse.Namespace) -> List[str]:
    """The one-rank run gets the cores one rank of the job gets (the job's ranks share this
    machine), else its compute would look faster than any rank's in the job."""
    cores, per_rank = usable_cores(), cores_per_rank(args)
    if per_rank >= len(cores) or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", ",".join(str(c) for c in cores[:per_rank])]


def one_run(args: argparse.Namespace, compression: str, ranks: int, out: Path) -> Dict:
    summary = out / f"{compression}_{ranks}.json"
    cmd = launch(args, ranks, train_command(args, compression, summary))
    cmd = compute_only_prefix(args) + cmd if ranks == 1 else cmd
    print(f"$ {' '.join(cmd)}", flush=True)
    before = cpu_ticks()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=args.timeout + 120)
    after = cpu_ticks()
    lines = [l for l in proc.stdout.splitlines() if "SUMMARY" in l]
    print("\n".join("  " + l for l in lines), flush=True)
    if proc.returncode != 0 or not summary.exists():
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"training with {compression} on {ranks} ranks failed (exit {proc.returncode})")
    result = json.loads(summary.read_text())
    result["machine_busy"] = (after[0] - before[0]) / max(1, after[1] - before[1])
    return result


def run(args: argparse.Namespace) -> int:
    refuse(check_args(args), build_parser)
    from horovod_q8.bench.common import machine, markdown

    out = Path(tempfile.mkdtemp(prefix="horovod_q8_bench_training_"))
    where = f"{args.ranks} emulated hosts x {args.bandwidth}" if args.hosts else f"{args.ranks} ranks, loopback"
    print(f"# bench training: {args.dataset} {args.model}, batch {args.batch_size}/rank, {where}; "
          f"{'stock hvd.DistributedOptimizer' if args.stock else 'fused optimizer for horovod_q8'}\n"
          f"# {machine()}", flush=True)
    compute = None if args.no_compute_run else one_run(args, "none", 1, out)
    results = [one_run(args, name, args.ranks, out) for name in args.compressions.split(",")]
    by_name = {r["compression"]: r for r in results}
    step_ms = {r["compression"]: 1e3 * args.batch_size * args.ranks / r["steady_images_per_s"] for r in results}
    compute_ms = 1e3 * args.batch_size / compute["steady_images_per_s"] if compute else None
    rows = []
    for r in results:
        name = r["compression"]
        ratio = {b: (r["steady_images_per_s"] / by_name[b]["steady_images_per_s"]) if b in by_name else float("nan")
                 for b in ("none", "fp16")}
        comm = "" if compute_ms is None else f"{max(0.0, 1 - compute_ms / step_ms[name]):.0%}"
        rows.append([name, f"{r['steady_images_per_s']:.1f}", f"{step_ms[name]:.0f}", comm,
                     f"{r['bytes_per_step'] / 1e6:.1f}", f"{ratio['fp16']:.2f}", f"{ratio['none']:.2f}",
                     f"{100 * r['test_accuracy']:.1f}", f"{r['machine_busy']:.0%}"])
    if compute_ms is not None:
        print(f"\ncompute only (1 rank on {cores_per_rank(args)} "
              f"of {len(usable_cores())} cores, nothing sent): {compute_ms:.0f} ms per step", flush=True)
    print("\n" + markdown(["compression", "images/s", "step ms", "not compute", "MB sent/rank/step",
                           "vs fp16", "vs fp32", "test acc %", "machine busy"], rows), flush=True)
    print("\nimages/s: steady state, after the first 2 batches; not compute: 1 - compute-only step / step; "
          "machine busy: all cores, the whole run (start-up included), from /proc/stat", flush=True)
    return 0
