"""Side probe for docs/launch.md ("Collectives"): each step of a pairwise alltoall of q8-sized
blocks (6.4 MB per rank pair, 25.6M elements over 4 ranks) timed by itself, then the steps in
sequence, then every block in flight at once (what the basic linear alltoallv does).

    horovod-q8 cluster --hosts 4 --bandwidth 1gbit [--mca NAME=VALUE] -- python scripts/tcp_pairwise_steps.py
"""
import numpy as np
from mpi4py import MPI

from horovod_q8.bench.common import barrier_median

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
m = 6_425_000
send, recv = np.ones(m * size, np.uint8), np.empty(m * size, np.uint8)


def step(k: int) -> None:
    to, frm = (rank + k) % size, (rank - k) % size
    comm.Sendrecv(send[to * m:(to + 1) * m], to, recvbuf=recv[frm * m:(frm + 1) * m], source=frm)


def all_at_once() -> None:
    reqs = []
    for k in range(1, size):
        to, frm = (rank + k) % size, (rank - k) % size
        reqs += [comm.Irecv(recv[frm * m:(frm + 1) * m], source=frm), comm.Isend(send[to * m:(to + 1) * m], to)]
    MPI.Request.Waitall(reqs)


def timed(f, reps: int = 7) -> float:
    return barrier_median(comm, f, reps)


def report(name: str, t: float, blocks: int) -> None:
    if rank == 0:
        print(f"{name}: {t * 1e3:.1f} ms, {blocks * m * 8 / t * 1e-9:.3f} Gbit/s per link", flush=True)


for k in range(1, size):
    report(f"step k={k} alone (to rank+{k}, from rank-{k})", timed(lambda: step(k)), 1)
report("the steps in sequence (pairwise)", timed(lambda: [step(k) for k in range(1, size)]), size - 1)
report("every block at once (Isend/Irecv)", timed(all_at_once), size - 1)
