"""The CPU codec's rates on ranks that share cores, with as many threads per rank as the
machine has cores (Numba's default) against each rank's share (`cores.codec_threads`, the
default), timed as Auto's calibration times them: every rank at once after a barrier, the two
settings alternating round by round.

    horovodrun -np 2 -H localhost:2 --gloo python scripts/codec_threads.py [--format q8] [--rounds 8]
"""
from __future__ import annotations

import argparse

import horovod.tensorflow as hvd
import numba

from horovod_q8.backends import cpu_kernels
from horovod_q8.bench.common import machine
from horovod_q8.collective.auto import codec_rates
from horovod_q8.cores import codec_threads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--format", default="q8")
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    hvd.init()
    share, why = codec_threads()
    settings = {f"all cores ({numba.config.NUMBA_NUM_THREADS} threads)": numba.config.NUMBA_NUM_THREADS,
                f"share ({share}: {why})": None}
    if hvd.rank() == 0:
        print(f"# {hvd.size()} ranks, {hvd.local_size()} on this host; {machine()}; numba {numba.__version__}, "
              f"threading layer {numba.config.THREADING_LAYER}; {args.format}, G elements/s per rank "
              "(encode / decode / sum of 2 parts)")
    for r in range(args.rounds):
        for label, threads in settings.items():
            cpu_kernels.THREADS = threads
            rates = codec_rates([args.format], together=lambda: hvd.allgather_object(None), warm=r == 0)
            got = hvd.allgather_object(rates[0][1:])
            if hvd.rank() == 0:
                print(f"round {r} {label:55s} " + "  ".join(
                    "/".join(f"{v / 1e9:.2f}" for v in g) for g in got), flush=True)


if __name__ == "__main__":
    main()
