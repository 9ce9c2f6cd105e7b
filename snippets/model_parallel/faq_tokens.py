"""The loss over valid tokens when ranks and micro-batches hold different numbers.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_tokens.py [--fix]
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="sum the losses, divide by the global number of valid tokens")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_tokens.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 4 % world:
    sys.exit(f"run with 1, 2 or 4 processes (they share 4 sequences), not {world}"
             if rank == 0 else 2)
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
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(16, 32), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 16)).to(device)


# --8<-- [start:data]
# 4 sequences of 8 tokens; -100 marks padding (and prompts, in fine-tuning)
torch.manual_seed(1)
tokens = torch.randint(0, 16, (4, 9), device=device)
labels = tokens[:, 1:].clone()
for i, valid in enumerate([8, 2, 5, 1]):  # valid labels in each sequence
    labels[i, valid:] = -100
inputs = tokens[:, :-1]
per_rank = 4 // world  # each rank's sequences, 1 per micro-batch
mine = range(rank * per_rank, (rank + 1) * per_rank)
# --8<-- [end:data]

mesh = init_device_mesh(device.type, (world,))
model = make_model()
fully_shard(model[1], mesh=mesh)
fully_shard(model, mesh=mesh)  # gradients: averaged over the ranks
ref = make_model()
ce = nn.functional.cross_entropy
# one process: the mean over every valid token of the global batch
ce(ref(inputs).flatten(0, 1), labels.flatten(), ignore_index=-100).backward()

if not args.fix:
    # --8<-- [start:bug]
    for i in mine:  # gradient accumulation: one micro-batch per sequence
        loss = ce(model(inputs[i]), labels[i], ignore_index=-100)  # (8, 16)
        (loss / per_rank).backward()  # a mean per micro-batch, / micro-batches
    # --8<-- [end:bug]
else:
    # --8<-- [start:fix]
    valid = (labels[list(mine)] != -100).sum()  # this rank's valid tokens
    dist.all_reduce(valid)  # every rank's: the global count, before any backward
    for i in mine:
        loss = ce(model(inputs[i]), labels[i], ignore_index=-100,
                  reduction="sum")  # a sum, not a mean
        (loss / valid * world).backward()  # * world: FSDP divides by the world size
    # --8<-- [end:fix]
diff = torch.tensor(max((p.grad.full_tensor() - q.grad).abs().max().item()
                        for p, q in zip(model.parameters(), ref.parameters())))
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
counts = (labels != -100).sum(1).tolist()
if rank == 0:
    print(f"valid tokens per sequence: {counts}; rank r has sequences "
          f"{per_rank}r..{per_rank}r+{per_rank - 1}")
    verdict = ("< 1e-6: equal up to float32 round-off" if diff < 1e-6
               else ">= 1e-6: not the gradient of the mean over all tokens")
    print(f"gradient, max abs diff from one process: {diff.item():.1e}")
    print(f"  ({verdict})")
dist.destroy_process_group()
if args.fix and rank == 0 and not diff < 1e-6:  # the fix must give one process's result
    sys.exit("with --fix: not what one process gives")
