"""`horovod-q8 cluster`: run a Horovod/MPI job on P emulated hosts with shaped links.

    horovod-q8 cluster --hosts 4 --bandwidth 1gbit -- horovod-q8 bench transfer
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Optional

from horovod_q8.cluster.netns import (PREFIX, Cluster, ClusterError, existing_namespaces,
                                      parse_rate, parse_time, remove_namespaces, require_root)


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 cluster", description=__doc__)
    p.add_argument("--hosts", type=int, default=4, help="emulated hosts (one namespace each)")
    p.add_argument("--bandwidth", default="1gbit", help="each host's link, both directions; 'none' for unshaped")
    p.add_argument("--latency", default="0", help="one-way host-to-host delay, e.g. 50us")
    p.add_argument("--slots", type=int, default=1, help="processes per host")
    p.add_argument("--allreduce", choices=["ring", "default"], default="ring",
                   help="OpenMPI's allreduce algorithm for uncompressed tensors")
    p.add_argument("--mca", action="append", default=[], metavar="NAME=VALUE", type=mca_setting,
                   help="an OpenMPI MCA parameter for the job, e.g. coll_tuned_alltoallv_algorithm=1; "
                        "replaces the tuned collectives' value of the same name (repeatable)")
    p.add_argument("--pin-cores", action="store_true",
                   help="give each host cores of its own (taskset), as real hosts have; needs a core per host")
    p.add_argument("--subnet", default="10.99.0.0/24")
    p.add_argument("--timeout", type=float, default=None, help="seconds before the job is stopped")
    p.add_argument("--log", default=None, help="also write the job's output here")
    p.add_argument("--cleanup", action="store_true",
                   help=f"remove namespaces named {PREFIX}* left by a killed run, then exit")
    p.add_argument("job", nargs=argparse.REMAINDER, help="-- the command every host runs")
    return p


def mca_setting(text: str) -> tuple:
    """NAME=VALUE -> (NAME, VALUE); NAME as OpenMPI spells MCA parameters."""
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not re.fullmatch(r"[A-Za-z0-9_.,:^/-]+", value):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (e.g. coll_tuned_alltoallv_algorithm=1), got {text!r}")
    return name, value


def run(args: argparse.Namespace) -> int:
    try:
        require_root()
        if args.cleanup:
            left = existing_namespaces()
            remove_namespaces(left)
            print(f"removed {len(left)} namespaces: {' '.join(left) or '-'}")
            return 0
        from horovod_q8.cluster.mpirun import run_job

        job = args.job[1:] if args.job[:1] == ["--"] else args.job
        bandwidth = None if args.bandwidth.lower() == "none" else parse_rate(args.bandwidth)
        cluster = Cluster(args.hosts, bandwidth, parse_time(args.latency), args.subnet)
        print(f"horovod-q8 cluster: {args.hosts} hosts {' '.join(cluster.addresses)}, "
              f"{args.bandwidth} per link, latency {args.latency}, allreduce {args.allreduce}"
              + (", each host on cores of its own" if args.pin_cores else "")
              + "".join(f", {k}={v}" for k, v in args.mca), flush=True)
        log = open(args.log, "w") if args.log else None
        try:
            return run_job(cluster, job, args.slots, args.allreduce == "ring", args.timeout, log, args.pin_cores,
                           dict(args.mca))
        finally:
            if log is not None:
                log.close()
    except ClusterError as e:
        print(f"horovod-q8 cluster: error: {e}", file=sys.stderr)
        return 2


def main(argv=None) -> None:
    sys.exit(run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
