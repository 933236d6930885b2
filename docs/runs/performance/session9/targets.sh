#!/bin/bash
# This session's target runs (as root), each host pinned to a core of its own and then not, alternating.
# bash docs/runs/performance/session9/targets.sh [OUTDIR]
out=${1:-docs/runs/performance/session9}
for pin in --pin-cores ""; do
  tag=${pin:+_pinned}
  for job in "one:--breakdown --no-sizes --compressions none,fp16,q8,q4 --pipeline-elements 0,4194304 --repeats 5" \
             "resnet50:--no-sizes --resnet50 --fusion-mb 16 --no-per-tensor --compressions fp16,q8,q4 --repeats 5"; do
    name=${job%%:*}; args=${job#*:}
    echo "\$ horovod-q8 cluster --hosts 2 --bandwidth 1gbit $pin --timeout 1800 -- horovod-q8 bench allreduce $args" > $out/${name}_2x1gbit$tag.log
    flock /tmp/hq8-cpu.lock horovod-q8 cluster --hosts 2 --bandwidth 1gbit $pin --timeout 1800 -- \
      horovod-q8 bench allreduce $args 2>&1 | grep -v -e WARNING -e cpu_feature_guard -e "rebuild TensorFlow" \
      -e loop_optimizer >> $out/${name}_2x1gbit$tag.log
  done
done
