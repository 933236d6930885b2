#!/bin/bash
# A/B: before (192dfbc, /tmp/before) and after (the pool, /work/main), alternating.
V=/root/.cache/horovod_q8/venv/bin
cd /tmp
ab() {  # name, then the command
  local name=$1; shift
  for round in 1 2; do
    for tree in before after; do
      dir=/tmp/before; [ $tree = after ] && dir=/work/main
      echo "### $name $tree round $round: PYTHONPATH=$dir $*" >> /tmp/ab/$name.log
      PYTHONPATH=$dir flock /tmp/hq8-cpu.lock "$@" 2>&1 | grep -v -e WARNING -e cpu_feature_guard -e "rebuild TensorFlow" -e loop_optimizer | grep -e "^|" -e "^\[0\]<stdout>:|" -e SUMMARY -e "^#" >> /tmp/ab/$name.log
    done
  done
}
ab loopback $V/horovodrun -np 2 -H localhost:2 --gloo $V/horovod-q8 bench allreduce --breakdown --no-sizes --compressions fp16,q8,q4 --repeats 5
ab cluster2x1 $V/horovod-q8 cluster --hosts 2 --bandwidth 1gbit --timeout 1800 -- $V/horovod-q8 bench allreduce --breakdown --no-sizes --compressions none,fp16,q8,q4 --repeats 5
ab mlp_whole $V/horovod-q8 bench training --hosts --bandwidth 1gbit --batch-size 16 --steps-per-epoch 20 --epochs 2 --compressions fp16,q8 --no-compute-run
ab mlp_p1m $V/horovod-q8 bench training --hosts --bandwidth 1gbit --batch-size 16 --steps-per-epoch 20 --epochs 2 --compressions fp16,q8 --no-compute-run --pipeline-elements 1048576
echo DONE >> /tmp/ab/done
