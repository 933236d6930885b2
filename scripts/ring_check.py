"""Side check for docs/speedup.md (fp32 at 10 Gbit/s): Sendrecv bandwidth at 1, 16 and 51 MB
per link; MPI's own float32 sum op against NumPy's add (elements/s, every rank at once); and
MPI's float32 allreduce of 25.6M elements, out of place and in place.

    sudo -E horovod-q8 cluster --hosts 2 --bandwidth 10gbit -- python scripts/ring_check.py
"""
import numpy as np
from mpi4py import MPI

from horovod_q8.bench.common import barrier_median

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def sendrecv_gbit(n: int) -> float:
    out, into = np.ones(n, np.uint8), np.empty(n, np.uint8)
    t = barrier_median(comm, lambda: comm.Sendrecv(out, (rank + 1) % size, recvbuf=into, source=(rank - 1) % size), 5)
    return n / t * 8 / 1e9


x = np.random.default_rng(rank).standard_normal(25_600_000).astype(np.float32)
out, inplace = np.empty_like(x), x.copy()
comm.Allreduce(x, out)  # warm-up: touches the output
allreduce = barrier_median(comm, lambda: comm.Allreduce(x, out), 5)
in_place = barrier_median(comm, lambda: comm.Allreduce(MPI.IN_PLACE, inplace), 5)
bw = {mb: sendrecv_gbit(mb << 20) for mb in (1, 16, 51)}
a, b = x[: x.size // 2], out[: x.size // 2]
mpi_add = a.size / barrier_median(comm, lambda: MPI.SUM.Reduce_local(a, b), 5)
numpy_add = a.size / barrier_median(comm, lambda: np.add(b, a, out=b), 5)
if rank == 0:
    print("sendrecv Gbit/s", {k: round(v, 2) for k, v in bw.items()},
          f"add G/s: MPI {mpi_add / 1e9:.2f} NumPy {numpy_add / 1e9:.2f}",
          f"allreduce ms {allreduce * 1e3:.0f} in place {in_place * 1e3:.0f}", flush=True)
