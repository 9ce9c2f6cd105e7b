"""2-D parallelism: FSDP across one mesh dimension, tensor parallelism across the other.
Needs 4 processes; training compared with one process on the whole batch.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 \
         snippets/model_parallel/twod.py
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
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=4 snippets/model_parallel/twod.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if world != 4:  # a 2 x 2 mesh
    sys.exit(
        f"this program builds a 2 x 2 mesh: run it with --nproc-per-node=4, not {world}"
        if rank == 0
        else 2
    )
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

# --8<-- [start:mesh]
mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "tp"))
dp, tp = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()
coords = [None] * world
dist.all_gather_object(coords, (rank, dp, tp))
if rank == 0:
    print(f"mesh {mesh.mesh.tolist()}")
    print("rank -> (dp, tp):", {r: (d, t) for r, d, t in coords})
# --8<-- [end:mesh]

# --8<-- [start:model]
class Block(nn.Module):
    def __init__(self, dim=32, hidden=128):
        super().__init__()
        self.up, self.act, self.down = (
            nn.Linear(dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, dim),
        )

    def forward(self, x):
        # residual: x is needed whole on every tp rank
        return x + self.down(self.act(self.up(x)))


torch.manual_seed(0)
ref = nn.Sequential(Block(), Block()).to(device)
model = copy.deepcopy(ref)
for block in model:
    parallelize_module(
        block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()}
    )
    fully_shard(block, mesh=mesh["dp"])  # then shard each TP shard again across dp
fully_shard(model, mesh=mesh["dp"])
w = model[0].up.weight
if rank == 0:
    print(
        f"up.weight: placements {w.placements},\n  global {tuple(w.shape)}, local "
        f"{tuple(w.to_local().shape)}"
    )
# --8<-- [end:model]

# --8<-- [start:train]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(8, 32, device=device)  # the same batch everywhere
    # dp rank d takes half d; tp ranks share it
    model(x.chunk(2)[dp]).square().mean().backward()
    opt.step()
    opt.zero_grad()
    ref(x).square().mean().backward()
    opt_ref.step()
    opt_ref.zero_grad()
# --8<-- [end:train]

# --8<-- [start:check]
def my_piece(full, tp_dim):
    """The block of a full tensor that this rank holds: tp shard, then its dp shard."""
    if tp_dim is not None:
        full = full.chunk(2, dim=tp_dim)[tp]
    return full.chunk(2, dim=0)[dp]


tp_dims = {"up.weight": 0, "up.bias": 0, "down.weight": 1, "down.bias": None}
diff = torch.zeros((), device=device)
for (name, p), q in zip(model.named_parameters(), ref.parameters()):
    piece = my_piece(q.detach(), tp_dims[name.split(".", 1)[1]])
    diff = torch.maximum(diff, (p.to_local() - piece).abs().max())
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
if rank == 0:  # the verdict says what the figure shows
    verdict = ("< 1e-5: equal up to float32 round-off" if diff < 1e-5
               else ">= 1e-5: NOT equal, more than round-off")
    print(
        "after 3 SGD steps, max abs diff of every rank's shards from one process: "
        f"{diff.item():.1e}\n  ({verdict})"
    )
assert diff < 1e-5, "2D parallel training differs from one process"
# --8<-- [end:check]

del model, opt
gc.collect()
dist.destroy_process_group()
