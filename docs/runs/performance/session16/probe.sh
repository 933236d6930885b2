#!/bin/sh
# The side probes' runs behind docs/launch.md's "Collectives" table (session 16), one log each:
#   ./probe.sh HOSTS BANDWIDTH > probe_${HOSTS}x${BANDWIDTH}.log   (as root; default 4 1gbit)
cd "$(dirname "$0")"
H=${1:-4} BW=${2:-1gbit}
PUT=btl_tcp_flags=send,put,inplace,need-ack,need-csum,hetero-rdma  # OpenMPI 4.1's default
for put in "$PUT" btl_tcp_flags=send,inplace,need-ack,need-csum; do
    for a2a in 2 1; do
        echo "== --mca $put --mca coll_tuned_alltoallv_algorithm=$a2a"
        horovod-q8 cluster --hosts $H --bandwidth $BW --timeout 300 --mca "$put" \
            --mca coll_tuned_alltoallv_algorithm=$a2a -- python mpi_collectives.py 2>&1 | grep " ms"
    done
    echo "== --mca $put: the pairwise steps"
    horovod-q8 cluster --hosts $H --bandwidth $BW --timeout 300 --mca "$put" -- python tcp_steps.py 2>&1 | grep "Gbit"
done
