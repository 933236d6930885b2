"""Under elastic horovodrun (--min-np 2 --max-np 3, a discovery script that reads FLAG_DIR):
horovod.torch training with a horovod_q8 compressor while a rank joins and then leaves.

    ELASTIC_FLAG_DIR=D python torch_elastic.py COMPRESSION FUSED WARMUP

At step GROW_AT rank 0 creates D/grow (the discovery script then offers 3 slots), at SHRINK_AT
it creates D/shrink (2 slots again). Every step checks the averaged gradient against Horovod's
own average of the same local gradients (within the format's budget; exact while warming up
at 2 ranks) and that every rank holds the same bits; at the end, that no collective failed
(elastic Horovod would silently retry it from the last commit). Rank 0 prints each step's rank count and a
SUMMARY line; any failure raises, so the exit code is the verdict.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time

import horovod.torch as hvd
import torch

from horovod_q8.torch import compressor

GROW_AT, SHRINK_AT, STEPS = 3, 7, 11
BUDGET = {"q8": 0.03, "q4": 0.3, "auto": 0.3, "none": 1e-6}  # auto: whichever it chose


def main() -> None:
    name, fused, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3])
    flags = os.environ["ELASTIC_FLAG_DIR"]
    os.environ["HOROVOD_Q8_FUSED"] = fused
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(100, 40), torch.nn.ReLU(), torch.nn.Linear(40, 10))
    if name == "none":
        comp = hvd.Compression.none
    elif name == "auto":
        comp = compressor("auto", allow=("none", "fp16", "q8", "q4"), min_size=64, warmup_steps=warmup)
    else:
        comp = compressor(name, min_size=64, warmup_steps=warmup)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(), compression=comp)
    state = hvd.elastic.TorchState(model, opt, batch=0, sizes="")
    weight = model[0].weight
    restores = []  # a collective failed (ranks disagreed): elastic Horovod would retry from the last commit
    restore = state.restore
    state.restore = lambda: (restores.append(state.batch), restore())

    @hvd.elastic.run
    def train(state) -> None:
        while state.batch < STEPS:
            g = torch.Generator().manual_seed(state.batch * 100 + hvd.rank())
            x = torch.randn(8, 100, generator=g)
            local = torch.autograd.grad(model(x).pow(2).mean(), weight)[0]
            ref = hvd.allreduce(local, op=hvd.Average, name=f"ref.{state.batch}")
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.synchronize()
            got = weight.grad.clone()
            with opt.skip_synchronize():
                opt.step()
            err = float((got - ref).abs().mean() / ref.abs().mean())
            plain = name == "none" or state.batch < warmup and name != "auto"  # Auto may choose fp16 then
            budget = BUDGET["none"] if plain else BUDGET[name]
            assert err < budget, (state.batch, hvd.size(), err)
            digests = hvd.allgather_object(hashlib.sha1(got.numpy().tobytes()).hexdigest(), name=f"d.{state.batch}")
            assert len(set(digests)) == 1, (state.batch, digests)
            if hvd.rank() == 0:
                print(f"step {state.batch}: {hvd.size()} ranks, error {err:.4f}, identical on every rank", flush=True)
                for at, flag in ((GROW_AT, "grow"), (SHRINK_AT, "shrink")):
                    if state.batch == at and not os.path.exists(os.path.join(flags, flag)):
                        open(os.path.join(flags, flag), "w").close()
                        time.sleep(3)  # the driver's discovery runs every second
            state.sizes += str(hvd.size())
            state.batch += 1
            state.commit()

    train(state)
    failed = hvd.allgather_object(restores, name="restores")
    assert not any(failed), f"collectives failed and were retried at steps {failed} (by rank)"
    if hvd.rank() == 0:
        print(f"SUMMARY {name} fused={fused} warmup={warmup} sizes={state.sizes}", flush=True)


if __name__ == "__main__":
    main()
