"""The `horovod-q8` command: one entry point, subcommands loaded lazily."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="horovod-q8", description="8-bit and 4-bit compression for Horovod")
    sub = parser.add_subparsers(dest="subcommand", required=True)

    from horovod_q8.workloads import train
    train.build_parser(sub.add_parser("train", help="Keras training under horovodrun/mpirun"))

    from horovod_q8.workloads import hybrid
    hybrid.build_parser(sub.add_parser("hybrid", help="data-parallel conv + model-parallel FC, compressed activations"))

    from horovod_q8.workloads import compare
    compare.build_parser(sub.add_parser("compare", help="the main job: 2-process training per compression, one table"))

    from horovod_q8.workloads import report
    report.build_parser(sub.add_parser("report", help="accuracy table and plot from compare runs"))

    from horovod_q8 import launcher
    launcher.build_parser(sub.add_parser("launch", help="render a launch template and run or print it"))

    from horovod_q8 import doctor
    doctor.build_parser(sub.add_parser("doctor", help="check Horovod, TensorFlow, MPI, CuPy, kernels, network"))

    from horovod_q8.speedup import report as speedup
    speedup.build_parser(sub.add_parser("speedup", help="predicted time per step and speedup against GPU count"))

    from horovod_q8.cluster import command as cluster
    cluster.build_parser(sub.add_parser("cluster", help="run a job on emulated hosts (netns, tc-shaped links)"))

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    from horovod_q8.bench import allreduce, formats, transfer
    formats.build_parser(bench.add_parser("formats", help="error and speed of every format"))
    allreduce.build_parser(bench.add_parser("allreduce", help="compressed allreduce under horovodrun"))
    transfer.build_parser(bench.add_parser("transfer", help="mpi4py: link alpha/beta, codec rates, "
                                                           "transfer and allreduce per format"))

    argv = sys.argv[1:] if argv is None else list(argv)
    command: List[str] = []
    if argv[:1] == ["launch"]:
        argv, command = launcher.split_command(argv)
    args = parser.parse_args(argv)
    args.command = command
    if args.subcommand == "train":
        train.run(args)
    elif args.subcommand == "hybrid":
        hybrid.run(args)
    elif args.subcommand == "compare":
        sys.exit(compare.run(args))
    elif args.subcommand == "report":
        report.run(args)
    elif args.subcommand == "doctor":
        sys.exit(doctor.run(args))
    elif args.subcommand == "launch":
        sys.exit(launcher.run(args))
    elif args.subcommand == "speedup":
        speedup.run(args)
    elif args.subcommand == "cluster":
        sys.exit(cluster.run(args))
    elif args.bench == "formats":
        formats.run(args)
    elif args.bench == "transfer":
        transfer.run(args)
    else:
        allreduce.run(args)


if __name__ == "__main__":
    main()
