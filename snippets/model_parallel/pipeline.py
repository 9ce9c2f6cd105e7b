"""Pipeline parallelism with torch.distributed.pipelining: one stage per process, micro-
batches,
GPipe and 1F1B schedules, gradients compared with the unsplit model.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/pipeline.py
"""

import argparse
import copy
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/model_parallel/pipeline.py")
if os.environ["WORLD_SIZE"] != "2":  # the model is cut into two stages below
    sys.exit(f"two stages, one per process: run with --nproc-per-node=2, not "
             f"{os.environ['WORLD_SIZE']}" if os.environ["RANK"] == "0" else 2)

# --8<-- [start:setup]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo's send/recv fail on CUDA tensors ('Bad address'): use the CPU
    device, backend = torch.device("cpu"), "gloo"
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")
    print(f"{world} stages, one per process")
# --8<-- [end:setup]

# --8<-- [start:stages]
torch.manual_seed(0)  # every process builds the same full model ...
full = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                     nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
# ... and keeps its own layers: process 0 layers 0-3, process 1 layers 4-6
bounds = [0, 4, 7]
part = copy.deepcopy(full[bounds[rank]:bounds[rank + 1]])
stage = PipelineStage(part, stage_index=rank, num_stages=world, device=device)
# --8<-- [end:stages]

x = torch.randn(32, 16, device=device)  # the same batch everywhere (same seed)
y = torch.randn(32, 4, device=device)
loss_fn = nn.MSELoss()  # mean over the micro-batch


def max_grad_diff(a, b, scale=1.0):
    # relative to each reference gradient (some are ~5e-3):
    # max |got - want| / max |want|, the worst parameter
    d = max(
        (p.grad - scale * q.grad).abs().max() / (scale * q.grad).abs().max()
        for p, q in zip(a.parameters(), b.parameters())
    )
    dist.all_reduce(d, op=dist.ReduceOp.MAX)  # the worst over all stages
    return d.item()


# --8<-- [start:reference]
full(x).sub(y).square().mean().backward()  # the unsplit model on the whole batch
# the same layers as this stage, for comparison
mine = full[bounds[rank]:bounds[rank + 1]]
# --8<-- [end:reference]

# --8<-- [start:schedules]
if rank == 0:
    print("schedule, setting: what the gradients should equal, max rel diff from it")
for Schedule in (ScheduleGPipe, Schedule1F1B):
    for scale_grads in (True, False):
        part.zero_grad()
        schedule = Schedule(
            stage, n_microbatches=4, loss_fn=loss_fn, scale_grads=scale_grads
        )
        losses = []
        if rank == 0:
            # the first stage gets the input, split into 4 micro-batches
            schedule.step(x)
        else:
            # the last stage gets targets, returns losses
            schedule.step(target=y, losses=losses)
        diff = max_grad_diff(part, mine, scale=1.0 if scale_grads else 4.0)
        want = ("the full-batch gradient" if scale_grads
                else "4 times the full-batch gradient")
        if rank == 0:
            verdict = "< 1e-5" if diff < 1e-5 else ">= 1e-5: NOT equal"  # computed
            short = "full-batch grad" if scale_grads else "4 x full-batch grad"
            print(f"{Schedule.__name__:13} scale_grads={scale_grads!s:5}: "
                  f"grads == {short:19} {diff:.1e} ({verdict})")
        assert diff < 1e-5, f"the gradients are not {want}"
# --8<-- [end:schedules]

# --8<-- [start:bubble]
if rank == 0:
    p = world
    for m in (1, 2, 4, 8, 32):
        print(
            f"p={p} stages, m={m:2d} micro-batches: bubble (p-1)/(m+p-1) = "
            f"{(p - 1) / (m + p - 1):.0%}"
        )
# --8<-- [end:bubble]

del schedule, stage, part
gc.collect()
dist.destroy_process_group()
