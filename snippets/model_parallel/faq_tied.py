"""Tied embeddings under FSDP2: the embedding and the output layer share one weight.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_tied.py [--fix]
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

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="the embedding and the head in one FSDP group")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_tied.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 8 % world:
    sys.exit(f"run with 1, 2, 4 or 8 processes (they share a batch of 8), not {world}"
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


# --8<-- [start:model]
class TiedLM(nn.Module):
    def __init__(self, vocab=16, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one Parameter, two modules

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)))
# --8<-- [end:model]


def make_model():
    torch.manual_seed(0)
    return TiedLM().to(device)


mesh = init_device_mesh(device.type, (world,))
model = make_model()
if not args.fix:
    # --8<-- [start:bug]
    fully_shard(model.block, mesh=mesh)  # one group per layer, as for the blocks
    fully_shard(model.embed, mesh=mesh)
    fully_shard(model.head, mesh=mesh)
    fully_shard(model, mesh=mesh)
    tied = model.head.weight is model.embed.weight
    try:
        model(torch.tensor([[1, 2, 3]], device=device))  # the first forward checks
    except ValueError as e:
        if rank == 0:
            print(f"still tied after fully_shard: {tied}")
            print(textwrap.fill(f"first forward: ValueError: {e}", 78,
                                subsequent_indent="  "))
    # --8<-- [end:bug]
    dist.destroy_process_group()
    sys.exit(0)

# --8<-- [start:fix]
fully_shard(model.block, mesh=mesh)
fully_shard([model.embed, model.head], mesh=mesh)  # one group: gathered once
fully_shard(model, mesh=mesh)
# --8<-- [end:fix]
print_tied = model.head.weight is model.embed.weight
ref = make_model()  # one process, the whole batch
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2)
loss_fn = nn.CrossEntropyLoss()
for step in range(3):
    tokens = torch.randint(0, 16, (8, 6), device=device)  # same seed: same batch
    mine = slice(rank * 8 // world, (rank + 1) * 8 // world)
    out = model(tokens[mine, :-1])
    loss_fn(out.flatten(0, 1), tokens[mine, 1:].flatten()).backward()
    opt.step()
    opt.zero_grad()
    loss_fn(ref(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
    opt_ref.step()
    opt_ref.zero_grad()
diff = torch.tensor(max((p.full_tensor() - q).abs().max().item()
                        for p, q in zip(model.parameters(), ref.parameters())))
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
if rank == 0:
    print(f"still tied after fully_shard: {print_tied}; "
          f"parameters: {len(list(model.parameters()))}")
    print("after 3 Adam steps, each rank on its half of the batch:")
    print(f"max abs diff from one process: {diff.item():.1e} "
          + ("(< 1e-5: equal up to float32 round-off)" if diff < 1e-5
             else "(>= 1e-5: not what one process trains)"))
assert diff < 1e-5, diff
dist.destroy_process_group()
