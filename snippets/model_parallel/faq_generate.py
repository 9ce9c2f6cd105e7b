"""A method other than forward under FSDP2: generate() reads sharded weights.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_generate.py [--fix]
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
from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="register generate() as a forward method")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_generate.py")
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


# --8<-- [start:model]
class TinyLM(nn.Module):
    def __init__(self, vocab=16, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):  # FSDP runs its hooks around this method only
        return self.head(self.block(self.embed(tokens)))

    @torch.no_grad()
    def generate(self, tokens, new_tokens):  # greedy; it calls forward
        for _ in range(new_tokens):          # itself, not self(...)
            nxt = self.forward(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens
# --8<-- [end:model]


def make_model():
    torch.manual_seed(0)  # the same weights on every rank
    return TinyLM().to(device)


mesh = init_device_mesh(device.type, (world,))
# --8<-- [start:shard]
model = make_model()
fully_shard(model.block, mesh=mesh)
fully_shard(model, mesh=mesh)  # the root: embed and head
if args.fix:
    register_fsdp_forward_method(model, "generate")  # gather around generate()
# --8<-- [end:shard]
prompt = torch.tensor([[1, 2, 3]], device=device)
if not args.fix:
    try:
        model.generate(prompt, 5)
    except RuntimeError as e:
        if rank == 0:
            print(textwrap.fill(f"generate: RuntimeError: {str(e).splitlines()[0]}",
                                78, subsequent_indent="  "))
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)

# --8<-- [start:fix]
out = model.generate(prompt, 5)  # every rank calls it: each forward all-gathers
ref = make_model().generate(prompt, 5)  # one process, the whole model
# --8<-- [end:fix]
same = torch.tensor(int(torch.equal(out, ref)), device=device)
dist.all_reduce(same, op=dist.ReduceOp.MIN)
if rank == 0:
    print(f"generated: {out[0].tolist()}")
    print(f"one process: {ref[0].tolist()}")
    print(f"same tokens on every rank as one process: {bool(same)}")
dist.barrier()
dist.destroy_process_group()
if args.fix and not same:  # the fix must give one process's tokens
    sys.exit("with --fix: not the tokens one process generates")
