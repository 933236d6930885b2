#!/usr/bin/env bash
# One benchmark command run with this tree and with an earlier commit's code, alternately, on
# the same machine: a change to the engine or a frontend (not only to the codec, which
# `horovod-q8 bench codec --baseline REV` compares in one process) measured against what it
# replaced. The earlier code runs from a git worktree through PYTHONPATH (forwarded to every
# rank by `horovod-q8 cluster` and horovodrun); each run's output goes to the log in turn.
#   bash scripts/bench_against.sh REV ROUNDS LOG -- COMMAND...
# e.g. (as root) bash scripts/bench_against.sh b693fd4 2 docs/runs/x.log -- horovod-q8 cluster
#      --hosts 2 --bandwidth none -- horovod-q8 bench allreduce --resnet50 --no-sizes ...
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
export PATH="$VENV/bin:$PATH" TF_CPP_MIN_LOG_LEVEL=2
[ $# -ge 5 ] && [ "$4" = "--" ] || { echo "usage: $0 REV ROUNDS LOG -- COMMAND..." >&2; exit 2; }
REV="$(git -C "$REPO" rev-parse --short "$1")"; ROUNDS="$2"; LOG="$3"; shift 4
BASE="$(mktemp -d /tmp/hq8-base-XXXXXX)"
trap 'git -C "$REPO" worktree remove --force "$BASE" >/dev/null 2>&1 || rm -rf "$BASE"' EXIT
git -C "$REPO" worktree add --detach -f "$BASE" "$REV" >/dev/null
HEAD_REV="$(git -C "$REPO" rev-parse --short HEAD)"
dirty="$(git -C "$REPO" status --porcelain --untracked-files=no | head -1)"
mkdir -p "$(dirname "$LOG")"
{
  echo "# bash scripts/bench_against.sh $REV $ROUNDS $LOG -- $*"
  echo "# this tree: $HEAD_REV${dirty:+ (with uncommitted changes)}; baseline: $REV; $(date -u +%FT%TZ)"
} > "$LOG"
# horovodrun tags each line with its rank ([0]<stdout>:, [1,0]<stderr>:): rank 0's stdout stays, untagged
rank0() { awk '/^\[/ && !/^\[[0-9,]*0\]<stdout>:/ {next} {sub(/^\[[0-9,]*\]<stdout>:/, ""); print}'; }
for r in $(seq 1 "$ROUNDS"); do
  for code in baseline tree; do
    echo "## round $r: $code ($([ $code = tree ] && echo "$HEAD_REV" || echo "$REV"))" | tee -a "$LOG"
    if [ $code = baseline ]; then
      (cd /tmp && PYTHONPATH="$BASE" "$@") 2>&1 | rank0 | tee -a "$LOG"
    else
      (cd /tmp && "$@") 2>&1 | rank0 | tee -a "$LOG"
    fi
  done
done
