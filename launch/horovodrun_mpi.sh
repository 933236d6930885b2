#!/usr/bin/env bash
# horovodrun with the MPI controller (it calls mpirun for you).
#   ${NP}       total processes
#   ${HOSTS}    host:slots list, e.g. node1:4,node2:4
#   ${IFACE}    network interface between hosts; MPI's TCP traffic and NCCL's bootstrap use it
#   ${EXPORTS}  extra `export VAR=value` lines
#   ${COMMAND}  the training command
set -euo pipefail
export NCCL_SOCKET_IFNAME=${IFACE}
${EXPORTS}
horovodrun --mpi -np ${NP} -H ${HOSTS} --network-interfaces ${IFACE} ${COMMAND}
