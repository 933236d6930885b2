"""Side check for docs/cluster.md: how fast the two-phase schedule's collectives move q8-sized
blocks (6.4 MB per rank pair, 25.6M elements over 4 ranks) on the emulated links, as OpenMPI
runs them (Alltoall, Allgather) and as Sendrecv steps (a ring allgather, a pairwise
alltoall), next to the ring's Sendrecv rate that the model takes as the link bandwidth.

    sudo -E horovod-q8 cluster --hosts 4 --bandwidth 1gbit -- python scripts/collective_check.py
"""
import numpy as np
from mpi4py import MPI

from horovod_q8.bench.common import barrier_median

from horovod_q8.collective.mpi import ring_allgatherv
from horovod_q8.bench.transfer import ring_bandwidth

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
m = 6_425_000  # bytes of one q8 chunk (6.4M elements + block scales)
send, recv = np.ones(m * size, np.uint8), np.empty(m * size, np.uint8)


def pairwise_alltoall() -> None:
    for k in range(1, size):
        to, frm = (rank + k) % size, (rank - k) % size
        comm.Sendrecv(send[to * m:(to + 1) * m], to, recvbuf=recv[frm * m:(frm + 1) * m], source=frm)


times = {
    "MPI Alltoall": barrier_median(comm, lambda: comm.Alltoall(send, recv)),
    "pairwise Sendrecv alltoall": barrier_median(comm, pairwise_alltoall),
    "MPI Allgather": barrier_median(comm, lambda: comm.Allgather(send[:m], recv)),
    "ring Sendrecv allgather": barrier_median(comm, lambda: ring_allgatherv(comm, send[:m], recv, [m] * size)),
}
ring = ring_bandwidth(comm, 16 << 20)
if rank == 0:
    sent = (size - 1) * m
    print(f"{size} ranks, {m} bytes per block; ring Sendrecv {ring * 8e-9:.3f} Gbit/s per link")
    for name, t in times.items():
        print(f"{name}: {t * 1e3:.0f} ms, {sent / t * 8e-9:.3f} Gbit/s per link", flush=True)
