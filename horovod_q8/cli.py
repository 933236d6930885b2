"""The `horovod-q8` command: one entry point, subcommands loaded lazily."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="horovod-q8", description="8-bit and 4-bit compression for Horovod")
    sub = parser.add_subparsers(dest="command", required=True)

    from horovod_q8.workloads import train
    train.build_parser(sub.add_parser("train", help="Keras training under horovodrun/mpirun"))

    from horovod_q8.workloads import compare
    compare.build_parser(sub.add_parser("compare", help="the main job: 2-process training per compression, one table"))

    from horovod_q8.workloads import report
    report.build_parser(sub.add_parser("report", help="accuracy table and plot from compare runs"))

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    from horovod_q8.bench import allreduce, formats
    formats.build_parser(bench.add_parser("formats", help="error and speed of every format"))
    allreduce.build_parser(bench.add_parser("allreduce", help="compressed allreduce under horovodrun"))

    args = parser.parse_args(argv)
    if args.command == "train":
        train.run(args)
    elif args.command == "compare":
        sys.exit(compare.run(args))
    elif args.command == "report":
        report.run(args)
    elif args.bench == "formats":
        formats.run(args)
    else:
        allreduce.run(args)


if __name__ == "__main__":
    main()
