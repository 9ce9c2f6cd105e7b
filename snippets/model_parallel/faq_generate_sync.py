"""Ranks that stop generating at different lengths: the others wait in an all-gather.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_generate_sync.py [--fix]
"""

import argparse
import os
import re
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="every rank forwards until every rank is done")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_generate_sync.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if world < 2:
    sys.exit("run with 2 or more processes: one rank must finish first")
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
# The failing run waits 4 s, not the default 10 minutes, before giving up.
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60 if args.fix else 4))
report = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))  # to print
if rank == 0:
    print(f"{world} processes: {backend} on {device.type}")


class TinyLM(nn.Module):
    def __init__(self, vocab=16, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)))


# --8<-- [start:bug]
@torch.no_grad()
def generate(model, tokens, new_tokens):  # greedy; stops when this rank is done
    for _ in range(new_tokens):
        nxt = model(tokens)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
    return tokens
# --8<-- [end:bug]


# --8<-- [start:fix]
@torch.no_grad()
def generate_synced(model, tokens, new_tokens):
    start = tokens.shape[1]
    while True:
        done = torch.tensor(int(tokens.shape[1] - start >= new_tokens), device=device)
        dist.all_reduce(done, op=dist.ReduceOp.MIN)  # 1 only when every rank is done
        if done:
            return tokens
        nxt = model(tokens)[:, -1].argmax(-1, keepdim=True)  # done or not: forward
        if tokens.shape[1] - start < new_tokens:  # a finished rank drops the token
            tokens = torch.cat([tokens, nxt], dim=1)
# --8<-- [end:fix]


def make_model():
    torch.manual_seed(0)  # the same weights on every rank
    return TinyLM().to(device)


mesh = init_device_mesh(device.type, (world,))
model = make_model()
fully_shard(model.block, mesh=mesh)
fully_shard(model, mesh=mesh)
prompt = torch.tensor([[1 + rank, 2, 3]], device=device)  # each rank its own request
new_tokens = 2 if rank == 0 else 5  # rank 0's request ends first
if not args.fix:
    try:
        generate(model, prompt, new_tokens)
        line = f"rank {rank}: done, {new_tokens} new tokens"
    except RuntimeError as e:  # gloo: "Timed out waiting 4000ms for send ..."
        m = re.search(r"Timed out waiting \d+ms", str(e))
        line = f"rank {rank}: RuntimeError: {m[0] if m else str(e).splitlines()[0]}"
    lines = [None] * world
    dist.all_gather_object(lines, line, group=report)  # not the group that timed out
    if rank == 0:
        print("\n".join(lines))
    sys.exit(0)  # the default group timed out: no destroy_process_group()

out = generate_synced(model, prompt, new_tokens)
ref = generate(make_model(), prompt, new_tokens)  # one process, the whole model
same = torch.tensor(int(torch.equal(out, ref)), device=device)
dist.all_reduce(same, op=dist.ReduceOp.MIN)
lines = [None] * world
dist.all_gather_object(lines, f"rank {rank}: {out[0].tolist()}", group=report)
if rank == 0:
    print("\n".join(lines))
    print(f"same tokens on every rank as one process: {bool(same)}")
dist.barrier()
dist.destroy_process_group()
if not same:  # the fix must give one process's tokens
    sys.exit("with --fix: not the tokens one process generates")
