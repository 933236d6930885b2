#!/usr/bin/env bash
# Where the time of the product path goes (`bench allreduce --breakdown`) and ResNet-50's
# gradient list through the stock optimizer path, on loopback (2 ranks, Gloo) and on the
# emulated cluster (needs root). Output: docs/runs/allreduce/<date>-<commit>/ (or $OUT), one
# log per job, the command on its first line. Every job holds /tmp/hq8-cpu.lock.
#   sudo bash scripts/perf_bench.sh                       # everything
#   sudo bash scripts/perf_bench.sh loopback cluster_2x1gbit
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
OUT="${OUT:-$REPO/docs/runs/allreduce/$(date +%F)-$(git -C "$REPO" rev-parse --short HEAD)}"
TAG="${TAG:-after}"
SECTIONS="${*:-loopback cluster_2x1gbit cluster_4x1gbit cluster_2x10gbit}"
COMPRESSIONS="${COMPRESSIONS:-none,fp16,q8,q4}"
mkdir -p "$OUT"
HQ8="$VENV/bin/horovod-q8"
BENCH=(bench allreduce --breakdown --no-sizes --resnet50 --compressions "$COMPRESSIONS" --repeats 5
       --pipeline-elements "${PIPELINE_ELEMENTS:-0}")

logged() {  # logged NAME -- command...
  local name=$1; shift 2
  { echo "\$ $*"; flock /tmp/hq8-cpu.lock "$@" 2>&1 | grep -v -e "WARNING" -e "cpu_feature_guard" -e "rebuild TensorFlow"; } \
    > "$OUT/${name}_$TAG.log"
  echo "wrote $OUT/${name}_$TAG.log" >&2
}

for section in $SECTIONS; do
  case $section in
    loopback)
      logged loopback_2 -- "$VENV/bin/horovodrun" -np 2 -H localhost:2 --gloo "$HQ8" "${BENCH[@]}";;
    cluster_*)
      spec=${section#cluster_}; hosts=${spec%%x*}; bw=${spec#*x}
      logged "cluster_$spec" -- "$HQ8" cluster --hosts "$hosts" --bandwidth "$bw" --timeout 1800 -- \
        horovod-q8 "${BENCH[@]}";;
    *) echo "unknown section $section (loopback, cluster_HxBW)" >&2; exit 2;;
  esac
done
