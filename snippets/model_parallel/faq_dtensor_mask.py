"""A boolean mask on a DTensor: x[mask] needs aten.nonzero, which DTensor refuses.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_dtensor_mask.py [--fix]
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
from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="apply the mask to each rank's shard")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_dtensor_mask.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 32 % world:
    sys.exit(f"run with 1, 2, 4 or 8 processes (32 columns shared), not {world}"
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


def make_head():
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Linear(16, 32).to(device)  # an output layer: 32 classes


mesh = init_device_mesh(device.type, (world,))
# --8<-- [start:model]
head = parallelize_module(make_head(), mesh, ColwiseParallel(use_local_output=False))
torch.manual_seed(1)  # the same batch on every rank
x = torch.randn(8, 16, device=device)
labels = torch.tensor([3, -100, 7, 1, -100, -100, 30, 2], device=device)
logits = head(x)  # DTensor (8, 32), Shard(1): each rank 32 / world classes
keep = labels != -100  # a plain tensor, the same on every rank
# --8<-- [end:model]
if rank == 0:
    print(f"logits: {logits.placements}, global {tuple(logits.shape)}, "
          f"local {tuple(logits.to_local().shape)}")
if not args.fix:
    def attempt(name, pick):
        try:
            pick()
        except RuntimeError as e:
            if rank == 0:
                first = " ".join(str(e).split("\n\n")[0].split())
                print(textwrap.fill(f"{name}: RuntimeError: {first}", 78,
                                    subsequent_indent="  "))
    # --8<-- [start:bug]
    attempt("plain mask", lambda: logits[keep])  # the rows with a label
    dkeep = distribute_tensor(keep, mesh, [Replicate()])  # the mask made a DTensor
    attempt("DTensor mask", lambda: logits[dkeep])
    # --8<-- [end:bug]
    dist.destroy_process_group()
    sys.exit(0)

# --8<-- [start:fix]
# the mask picks rows, and each rank holds every row of its columns
picked = DTensor.from_local(logits.to_local()[keep], mesh, logits.placements)
# --8<-- [end:fix]
with torch.no_grad():
    ref = make_head()(x)[keep]  # one process, the whole layer
    full = picked.full_tensor()
    diff = ((full - ref).abs().max() if full.shape == ref.shape
            else torch.tensor(float("inf"), device=device))
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
if rank == 0:
    verdict = ("< 1e-6: equal up to float32 round-off" if diff < 1e-6
               else ">= 1e-6: not what one process picks")
    print(f"picked: {picked.placements}, global {tuple(picked.shape)}, "
          f"local {tuple(picked.to_local().shape)}")
    print(f"picked rows vs one process: {diff.item():.1e} ({verdict})")
dist.destroy_process_group()
if not diff < 1e-6:  # the fix must give one process's rows
    sys.exit("with --fix: not the rows one process picks")
