"""After a forward without backward, FSDP2's root parameters are whole, not DTensors.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_after_forward.py [--fix]
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
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="reshard() the model before reading its parameters")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_after_forward.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{world} processes: {backend} on {device.type}")


def make_model():
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Sequential(nn.Linear(16, 64), nn.ReLU()),
                         nn.Linear(64, 8)).to(device)


def held(model):  # parameter elements this rank holds right now
    return sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel()
               for p in model.parameters())


def kinds(model, when):
    if rank == 0:
        print(f"{when}: 0.0.weight {type(model[0][0].weight).__name__}, "
              f"1.weight {type(model[1].weight).__name__}; "
              f"held {held(model)} of {total}")


total = sum(p.numel() for p in make_model().parameters())
mesh = init_device_mesh(device.type, (world,))
# --8<-- [start:shard]
model = make_model()
fully_shard(model[0], mesh=mesh)  # a block
fully_shard(model, mesh=mesh)     # the root: it holds model[1]
# --8<-- [end:shard]
x = torch.randn(4, 16, device=device)  # same seed: the same input everywhere
loss = model(x).sum()
kinds(model, "after forward (train)")
loss.backward()
kinds(model, "after backward       ")
# --8<-- [start:bug]
with torch.no_grad():
    model(x)  # evaluation: a forward, no backward
# --8<-- [end:bug]
kinds(model, "after no_grad forward")
if not args.fix:
    try:
        norms = [p.full_tensor().norm() for p in model.parameters()]
    except AttributeError as e:
        if rank == 0:
            print(textwrap.fill(f"p.full_tensor(): AttributeError: {e}", 78,
                                subsequent_indent="  "))
    dist.destroy_process_group()
    sys.exit(0)

# --8<-- [start:fix]
model.reshard()  # the root's own weights back to shards (not recursive)
norms = [p.full_tensor().norm() for p in model.parameters()]  # whole on every rank
# --8<-- [end:fix]
kinds(model, "after model.reshard()")
ref = [p.norm() for p in make_model().parameters()]  # one process, the whole model
diff = torch.tensor(max((a - b).abs().item() for a, b in zip(norms, ref)))
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
if rank == 0:
    verdict = ("< 1e-6: equal up to float32 round-off" if diff < 1e-6
               else ">= 1e-6: not the weights one process has")
    print(f"weight norms vs one process: {diff.item():.1e} ({verdict})")
dist.destroy_process_group()
if not diff < 1e-6:  # the fix must give one process's weights
    sys.exit("with --fix: not the weights one process has")
