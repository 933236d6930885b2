"""Side probe for docs/launch.md ("Collectives"): OpenMPI's Alltoallv and Allgatherv of q8-sized
blocks (6.4 MB per rank pair) and an Allreduce of fp16's bytes (51.2 MB) as the tuned
algorithms chosen by MCA parameters run them, median of 7.

    horovod-q8 cluster --hosts 4 --bandwidth 1gbit [--mca NAME=VALUE] -- python scripts/mpi_collectives_time.py
"""
import numpy as np
from mpi4py import MPI

from horovod_q8.bench.common import barrier_median

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
m = 6_425_000
send, recv = np.ones(m * size, np.uint8), np.empty(m * size, np.uint8)
g, go = np.ones(12_800_000, np.float32), np.empty(12_800_000, np.float32)
layout = [[m] * size, [m * i for i in range(size)]]


def timed(f, reps: int = 7) -> float:
    return barrier_median(comm, f, reps)


times = {
    "Alltoallv": timed(lambda: comm.Alltoallv([send, *layout, MPI.BYTE], [recv, *layout, MPI.BYTE])),
    "Allgatherv": timed(lambda: comm.Allgatherv(send[:m], [recv, *layout, MPI.BYTE])),
    "Allreduce of 51.2 MB": timed(lambda: comm.Allreduce(g, go)),
}
if rank == 0:
    print("  ".join(f"{k}: {t * 1e3:.0f} ms" for k, t in times.items()), flush=True)
