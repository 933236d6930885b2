#!/usr/bin/env bash
# Horovod's own Keras example, tensorflow2_keras_synthetic_benchmark.py, run as Horovod ships
# it (none; --fp16-allreduce) and with its one compression line switched to horovod_q8's Q8
# (and Q4), 2 ranks on loopback, side by side. Horovod's examples are not in its sdist: give a
# Horovod checkout (or its bare git directory) as $1 or HOROVOD_SRC.
#   bash scripts/horovod_examples.sh ~/src/horovod [extra benchmark args...]
# Output: docs/runs/examples/<date>-<commit>/keras_synthetic_loopback_2.log (or $OUT); every run holds
# /tmp/hq8-cpu.lock.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${1:-${HOROVOD_SRC:-}}"
[ -n "$SRC" ] || { echo "usage: $0 HOROVOD_CHECKOUT_OR_GIT_DIR [benchmark args]" >&2; exit 2; }
shift || true
EXAMPLE=examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py
if [ $# -gt 0 ]; then ARGS=("$@")
else ARGS=(--model ResNet50 --batch-size 8 --num-batches-per-iter 5 --num-iters 4 --no-cuda); fi
VENV="$(bash "$REPO/scripts/setup.sh")"
OUT="${OUT:-$REPO/docs/runs/examples/$(date +%F)-$(git -C "$REPO" rev-parse --short HEAD)}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

if [ -f "$SRC/$EXAMPLE" ]; then
  cp "$SRC/$EXAMPLE" "$WORK/original.py"; from="$SRC/$EXAMPLE"
elif git --git-dir "$SRC" rev-parse --verify -q HEAD >/dev/null; then
  git --git-dir "$SRC" show "HEAD:$EXAMPLE" > "$WORK/original.py"
  from="$SRC @ $(git --git-dir "$SRC" rev-parse --short HEAD):$EXAMPLE"
else
  echo "no $EXAMPLE in $SRC (a Horovod checkout or git directory)" >&2; exit 2
fi
LINE='compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none'
grep -qF "$LINE" "$WORK/original.py" || { echo "the example's compression line changed: $LINE not found" >&2; exit 1; }
for q in Q8 Q4; do  # the one-line switch a user makes
  sed "s/^$LINE\$/from horovod_q8 import $q; compression = $q/" "$WORK/original.py" > "$WORK/${q,,}.py"
  grep -q "compression = $q" "$WORK/${q,,}.py"
done

log="$OUT/keras_synthetic_loopback_2.log"
{
  echo "# Horovod's $from, 2 ranks, loopback (Gloo); args: ${ARGS[*]}"
  echo "# $("$VENV/bin/python" -c 'from horovod_q8.bench.common import machine; print(machine())')"
  for run in "none:original.py:" "fp16:original.py:--fp16-allreduce" "q8:q8.py:" "q4:q4.py:"; do
    IFS=: read -r name file flag <<< "$run"
    echo "## $name: horovodrun -np 2 -H localhost:2 --gloo python $file ${flag} ${ARGS[*]}"
    flock /tmp/hq8-cpu.lock env TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/horovodrun" -np 2 -H localhost:2 --gloo \
      "$VENV/bin/python" "$WORK/$file" $flag "${ARGS[@]}" 2>&1 | grep -E "Total img/sec|Error|error" || true
  done
} | tee "$log"
echo "wrote $log" >&2
