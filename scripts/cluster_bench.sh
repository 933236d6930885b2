#!/usr/bin/env bash
# The emulated cluster's measurements (needs root), for each bandwidth in
# $BANDWIDTHS (default "1gbit 10gbit"); sections (default all): 
#   transfer   the transfer benchmark (mpi4py) on 4 and 2 hosts, $ROUNDS rounds (default 3)
#   allreduce  Horovod's allreduce of a 25.6M-element gradient on 4 and 2 hosts
#   train      ResNet-50 (32 px, batch 8, --synthetic) training throughput on 4 hosts per compression
# Output: docs/runs/cluster/<date>-<commit>/ (or $OUT). Every job holds /tmp/hq8-cpu.lock: nothing else timed runs.
#   sudo bash scripts/cluster_bench.sh                 # everything
#   sudo BANDWIDTHS=10gbit bash scripts/cluster_bench.sh train
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
OUT="${OUT:-$REPO/docs/runs/cluster/$(date +%F)-$(git -C "$REPO" rev-parse --short HEAD)}"
BANDWIDTHS="${BANDWIDTHS:-1gbit 10gbit}"
ROUNDS="${ROUNDS:-3}"
SECTIONS="${*:-transfer allreduce train}"
mkdir -p "$OUT"
HQ8="$VENV/bin/horovod-q8"

on() {  # on HOSTS BANDWIDTH LOGNAME -- command...
  local hosts=$1 bw=$2 name=$3; shift 4
  flock /tmp/hq8-cpu.lock "$HQ8" cluster --hosts "$hosts" --bandwidth "$bw" --timeout 1800 \
    --log "$OUT/$name.log" -- "$@"
}

for bw in $BANDWIDTHS; do
  for section in $SECTIONS; do
    case $section in
      transfer)
        for hosts in 4 2; do
          on "$hosts" "$bw" "transfer_${hosts}x$bw" -- horovod-q8 bench transfer --rounds "$ROUNDS" \
            --json "$OUT/transfer_${hosts}x$bw.json"
        done;;
      allreduce)
        for hosts in 4 2; do
          on "$hosts" "$bw" "allreduce_${hosts}x$bw" -- horovod-q8 bench allreduce --sizes-mb 97.65625 \
            --compressions none,fp16,q8,q8_linear,q4,q4_threshold,twobit
        done;;
      train)
        for c in none fp16 q8 q4; do
          on 4 "$bw" "train_${c}_4x$bw" -- horovod-q8 train imagenet --synthetic --image-size 32 \
            --batch-size 8 --epochs 1 --steps-per-epoch 10 --fused --compression "$c" --verbose 0 \
            --results-json "$OUT/train_${c}_4x$bw.json"
        done;;
      *) echo "unknown section $section (transfer, allreduce, train)" >&2; exit 2;;
    esac
  done
done
