#!/usr/bin/env bash
# OpenMPI 5 over UCX (InfiniBand / RoCE); NCCL for the GPU data.
#   ${NP}         total processes
#   ${HOSTS}      host:slots list
#   ${IFACE}      TCP interface for NCCL's bootstrap (NCCL_SOCKET_IFNAME)
#   ${UCX_ARGS}      -x UCX_NET_DEVICES=<--ib-device>, each HCA given a port (:1) where it has none
#   ${NCCL_IB_ARGS}  -x NCCL_IB_HCA=<--ib-device>; both nothing without --ib-device (UCX and NCCL pick)
#   ${MPI_ENV}    extra `-x VAR=value` words
#   ${MPI_EXTRA}  extra mpirun arguments
#   ${COMMAND}    the training command
set -euo pipefail
mpirun -np ${NP} -H ${HOSTS} \
    --bind-to none --map-by slot \
    --mca pml ucx --mca osc ucx \
    -x NCCL_SOCKET_IFNAME=${IFACE} ${UCX_ARGS} ${NCCL_IB_ARGS} \
    -x LD_LIBRARY_PATH -x PATH ${MPI_ENV} ${MPI_EXTRA} \
    ${COMMAND}
