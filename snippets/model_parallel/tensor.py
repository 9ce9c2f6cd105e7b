"""Tensor parallelism with DTensor: an MLP split column-wise then row-wise over a 1-D
DeviceMesh;
outputs and gradients compared with the unsharded model.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/tensor.py
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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/model_parallel/tensor.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 64 % world:  # the layers below (64 and 256 features) are cut into equal shards
    sys.exit(f"run with 1, 2, 4, 8, 16, 32 or 64 processes (equal shards), not {world}"
             if rank == 0 else 2)
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


def show(*args):
    if rank == 0:
        print(*args)


# --8<-- [start:mesh]
mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("tp",))
show(f"mesh: {mesh}")
# --8<-- [end:mesh]

# --8<-- [start:shard]
class MLP(nn.Module):
    def __init__(self, dim=64, hidden=256):
        super().__init__()
        self.up, self.act, self.down = (
            nn.Linear(dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, dim),
        )

    def forward(self, x):
        return self.down(self.act(self.up(x)))


torch.manual_seed(0)
ref = MLP().to(device)  # the unsharded model, the same on every process
tp = parallelize_module(copy.deepcopy(ref), mesh, {
    # weight rows (output features) split: each rank computes part of h
    "up": ColwiseParallel(),
    # weight columns (input features) split: partial sums, then all-reduce
    "down": RowwiseParallel(),
})
for name, p in tp.named_parameters():
    show(
        f"{name:12} {str(p.placements):18} global {tuple(p.shape)!s:10} local "
        f"{tuple(p.to_local().shape)}"
    )
# --8<-- [end:shard]

# --8<-- [start:run]
# the same input on every rank
x = torch.randn(8, 64, device=device, requires_grad=True)
x_ref = x.detach().clone().requires_grad_()
with CommDebugMode() as fwd:
    out = tp(x)
with CommDebugMode() as bwd:
    out.square().sum().backward()
show(
    "forward collectives: ",
    {str(op).split(".")[-1]: n for op, n in fwd.get_comm_counts().items()},
)
show(
    "backward collectives:",
    {str(op).split(".")[-1]: n for op, n in bwd.get_comm_counts().items()},
)
# --8<-- [end:run]

# --8<-- [start:check]
ref_out = ref(x_ref)
ref_out.square().sum().backward()
diffs = {
    "output": (out - ref_out).abs().max(),
    "input grad": (x.grad - x_ref.grad).abs().max(),
    "weight grads": max((p.grad.full_tensor() - q.grad).abs().max()
                        for p, q in zip(tp.parameters(), ref.parameters())),
}
for what, d in diffs.items():
    dist.all_reduce(d, op=dist.ReduceOp.MAX)
    verdict = "< 1e-5: float32 round-off" if d < 1e-5 else ">= 1e-5: NOT equal"
    show(f"max abs diff, {what:12}: {d.item():.1e} ({verdict})")
bad = [what for what, d in diffs.items() if not d < 1e-5]
assert not bad, f"not equal to one process: {', '.join(bad)}"
# --8<-- [end:check]

del tp, out
gc.collect()
dist.destroy_process_group()
