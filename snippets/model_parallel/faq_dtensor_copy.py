"""A full tensor into a DTensor parameter: copy_ refuses, distribute_tensor works.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_dtensor_copy.py [--fix]
"""

import argparse
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="distribute the full tensor like the parameter first")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_dtensor_copy.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 64 % world:
    sys.exit(f"run with 1, 2, 4 or 8 processes (64 columns shared), not {world}"
             if rank == 0 else 2)
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{world} processes: {backend} on {device.type}")


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16)).to(device)


mesh = init_device_mesh(device.type, (world,))
model = parallelize_module(make_model(), mesh,
                           {"0": ColwiseParallel(), "2": RowwiseParallel()})
torch.manual_seed(1)  # new weights for the first layer, whole, the same on every rank
new = torch.randn(64, 16, device=device) / 4
w = model[0].weight
if rank == 0:
    print(f"model[0].weight: {type(w).__name__} {w.placements}, global "
          f"{tuple(w.shape)}, local {tuple(w.to_local().shape)}")
if not args.fix:
    # --8<-- [start:bug]
    try:
        with torch.no_grad():
            model[0].weight.copy_(new)  # a plain tensor into a DTensor
    except RuntimeError as e:
        if rank == 0:
            print(textwrap.fill(f"copy_: RuntimeError: {e}", 78,
                                subsequent_indent="  "))
    # --8<-- [end:bug]
    dist.destroy_process_group()
    sys.exit(0)

# --8<-- [start:fix]
with torch.no_grad():  # each rank keeps its own rows of the full tensor
    model[0].weight.copy_(distribute_tensor(new, w.device_mesh, w.placements))
# --8<-- [end:fix]
ref = make_model()  # one process: the same change on the plain model
with torch.no_grad():
    ref[0].weight.copy_(new)
x = torch.randn(8, 16, device=device)  # same seed: the same input everywhere
diff = torch.tensor((model(x) - ref(x)).abs().max().item())
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
if rank == 0:
    verdict = ("< 1e-6: equal up to float32 round-off" if diff < 1e-6
               else ">= 1e-6: not the model one process has")
    print(f"max abs diff from one process: {diff.item():.1e} ({verdict})")
dist.destroy_process_group()
if args.fix and rank == 0 and not diff < 1e-6:  # the fix must give one process's result
    sys.exit("with --fix: not what one process gives")
