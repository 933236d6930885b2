#!/usr/bin/env bash
# OpenMPI 5 over UCX (InfiniBand / RoCE); NCCL for the GPU data.
#   ${NP}         total processes
#   ${HOSTS}      host:slots list
#   ${IFACE}      TCP interface for NCCL's bootstrap (NCCL_SOCKET_IFNAME)
#   ${IB_DEVICE}  HCA: UCX_NET_DEVICES=${IB_DEVICE}:1 (port 1) and NCCL_IB_HCA
#   ${MPI_ENV}    extra `-x VAR=value` words
#   ${MPI_EXTRA}  extra mpirun arguments
#   ${COMMAND}    the training command
set -euo pipefail
mpirun -np ${NP} -H ${HOSTS} \
    --bind-to none --map-by slot \
    --mca pml ucx --mca osc ucx \
    -x UCX_NET_DEVICES=${IB_DEVICE}:1 \
    -x NCCL_IB_HCA=${IB_DEVICE} \
    -x NCCL_SOCKET_IFNAME=${IFACE} \
    -x LD_LIBRARY_PATH -x PATH ${MPI_ENV} ${MPI_EXTRA} \
    ${COMMAND}
