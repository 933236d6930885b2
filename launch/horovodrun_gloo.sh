#!/usr/bin/env bash
# horovodrun with the Gloo controller: no MPI needed, hosts reached over SSH.
#   ${NP}       total processes (nodes x GPUs per node)
#   ${HOSTS}    host:slots list, e.g. node1:4,node2:4
#   ${IFACE}    network interface between hosts (eth0, ens5, ib0): Horovod's rendezvous and Gloo use it
#   ${EXPORTS}  extra `export VAR=value` lines
#   ${COMMAND}  the training command, e.g. horovod-q8 train imagenet --compression q8 --fused
set -euo pipefail
# NCCL_SOCKET_IFNAME: the interface NCCL bootstraps on (GPU jobs); keep it off docker0/lo.
export NCCL_SOCKET_IFNAME=${IFACE}
${EXPORTS}
horovodrun --gloo -np ${NP} -H ${HOSTS} --network-interfaces ${IFACE} ${COMMAND}
