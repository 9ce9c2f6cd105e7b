"""FSDP2 with float16 and a gradient scaler: torch.amp.GradScaler or ShardedGradScaler,
and whether every rank skips the step when only one rank's shard overflows.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp_scaler.py
"""

import argparse
import gc
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/model_parallel/fsdp_scaler.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 16 % world:  # a batch of 16 shared out equally
    sys.exit(f"run with 1, 2, 4, 8 or 16 processes, not {world}" if rank == 0 else 2)
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")
mesh = init_device_mesh(device.type, (world,))


def show(*args):
    if rank == 0:
        print(*args)


def every_rank(value) -> list:
    values = [None] * world
    dist.all_gather_object(values, value)
    return values


def make_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to(device)
    fp16 = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    for layer in model[0], model[2]:
        fully_shard(layer, mesh=mesh, mp_policy=fp16)
    fully_shard(model, mesh=mesh, mp_policy=fp16)
    return model


torch.manual_seed(1)
x, y = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
mine = slice(rank * 16 // world, (rank + 1) * 16 // world)  # this rank's part


# --8<-- [start:step]
def step(scaler, overflow_on_rank_0: bool):
    """One training step; returns (step taken?, scale after update) on this rank."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model[0].weight.to_local().clone()
    with torch.autocast(device.type, dtype=torch.float16):  # the loss in float16 too
        loss = nn.functional.mse_loss(model(x[mine]), y[mine])
    scaler.scale(loss).backward()
    if overflow_on_rank_0 and rank == 0:  # as if float16 overflowed in rank 0's shard
        model[0].weight.grad.to_local()[0, 0] = float("inf")
    scaler.step(opt)  # unscales, checks for inf/NaN, steps only if there is none
    scaler.update()  # halves the scale after an overflow
    stepped = not torch.equal(before, model[0].weight.to_local())
    return stepped, scaler.get_scale()
# --8<-- [end:step]


# --8<-- [start:compare]
m = make_model()
out = m(x[mine])
out.float().sum().backward()
w = m[0].weight
show(f"fp16 FSDP2: output {out.dtype};\n"
     f"  sharded parameter {type(w).__name__} {w.dtype}, "
     f"its gradient {type(w.grad).__name__} {w.grad.dtype}")
for name, make in [("torch.amp.GradScaler", lambda: torch.amp.GradScaler(device.type)),
                   ("ShardedGradScaler", lambda: ShardedGradScaler(device.type))]:
    show(f"{name}:")
    for overflow in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stepped, scale = step(make(), overflow)
        stepped, scale = zip(*every_rank((stepped, scale)))
        show(f"  inf in rank 0's shard: {overflow}\n    step taken on each rank: "
             f"{list(stepped)}, scale after: {list(scale)}")
        for message in dict.fromkeys(str(w.message).split(", we")[0] for w in caught):
            show(f"    warning: {message}")
# --8<-- [end:compare]

gc.collect()
dist.destroy_process_group()
