#!/bin/sh
# What OpenMPI's TCP transport costs the collectives on emulated hosts: the alltoallv and
# allgatherv of q8-sized blocks and fp16's allreduce (mpi_collectives_time.py) with the TCP BTL's
# emulated RDMA put on and off and the pairwise or basic linear alltoallv, then each step of a
# pairwise alltoall by itself (tcp_pairwise_steps.py). Behind docs/launch.md's "Collectives".
#   sudo bash scripts/mpi_transport_probe.sh HOSTS BANDWIDTH > probe_${HOSTS}x${BANDWIDTH}.log   (default 4 1gbit)
cd "$(dirname "$0")"
H=${1:-4} BW=${2:-1gbit}
PUT=btl_tcp_flags=send,put,inplace,need-ack,need-csum,hetero-rdma  # OpenMPI 4.1's default
for put in "$PUT" btl_tcp_flags=send,inplace,need-ack,need-csum; do
    for a2a in 2 1; do
        echo "== --mca $put --mca coll_tuned_alltoallv_algorithm=$a2a"
        horovod-q8 cluster --hosts $H --bandwidth $BW --timeout 300 --mca "$put" \
            --mca coll_tuned_alltoallv_algorithm=$a2a -- python mpi_collectives_time.py 2>&1 | grep " ms"
    done
    echo "== --mca $put: the pairwise steps"
    horovod-q8 cluster --hosts $H --bandwidth $BW --timeout 300 --mca "$put" -- python tcp_pairwise_steps.py 2>&1 | grep "Gbit"
done
