#!/usr/bin/env bash
# OpenMPI 4: MPI control messages over TCP, gradient data by NCCL over InfiniBand/RoCE.
#   ${NP}         total processes
#   ${HOSTS}      host:slots list
#   ${IFACE}      TCP interface for MPI and NCCL's bootstrap (btl_tcp_if_include, NCCL_SOCKET_IFNAME)
#   ${NCCL_IB_ARGS}  -x NCCL_IB_HCA=<--ib-device>, e.g. mlx5_0; nothing without --ib-device (NCCL picks)
#   ${MPI_ENV}    extra `-x VAR=value` words forwarded to every rank
#   ${MPI_EXTRA}  extra mpirun arguments
#   ${COMMAND}    the training command
# -bind-to none / -map-by slot: let Horovod and TensorFlow use every core of a GPU's slot.
# -mca pml ob1 -mca btl ^openib: keep MPI off the verbs stack, which NCCL owns.
# coll_tuned_*, btl_tcp_flags: for CPU tensors (Horovod's MPI path over TCP), the ring
# allreduce, ring allgatherv and basic linear alltoallv, and the TCP BTL without its emulated
# RDMA put: the fastest on the emulated cluster (docs/launch.md, "Collectives").
set -euo pipefail
mpirun -np ${NP} -H ${HOSTS} \
    -bind-to none -map-by slot \
    -mca pml ob1 -mca btl ^openib \
    -mca coll_tuned_use_dynamic_rules 1 -mca coll_tuned_allreduce_algorithm 4 \
    -mca coll_tuned_allgatherv_algorithm 3 -mca coll_tuned_alltoallv_algorithm 1 \
    -mca btl_tcp_flags send,inplace,need-ack,need-csum -mca btl_tcp_if_include ${IFACE} \
    -x NCCL_SOCKET_IFNAME=${IFACE} ${NCCL_IB_ARGS} \
    -x LD_LIBRARY_PATH -x PATH ${MPI_ENV} ${MPI_EXTRA} \
    ${COMMAND}
