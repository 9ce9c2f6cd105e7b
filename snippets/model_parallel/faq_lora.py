"""LoRA adapters on a frozen model under FSDP2: which parameters the optimizer holds.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_lora.py [--fix]
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
                    help="build the optimizer after fully_shard")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_lora.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 16 % world:
    sys.exit(f"run with 1, 2, 4, 8 or 16 processes (they share a batch of 16), "
             f"not {world}" if rank == 0 else 2)
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
class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update B @ A (B starts at zero)."""

    def __init__(self, d_in, d_out, r=4):
        super().__init__()
        self.base = nn.Linear(d_in, d_out).requires_grad_(False)
        self.A = nn.Parameter(torch.randn(r, d_in) / d_in ** 0.5)
        self.B = nn.Parameter(torch.zeros(d_out, r))

    def forward(self, x):
        return self.base(x) + x @ self.A.T @ self.B.T


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(LoRALinear(32, 128), nn.ReLU(), LoRALinear(128, 4)).to(device)
# --8<-- [end:model]


def trainable(m):
    return [p for p in m.parameters() if p.requires_grad]


mesh = init_device_mesh(device.type, (world,))
ref = make_model()  # one process, whole batch
opt_ref = torch.optim.AdamW(trainable(ref), lr=1e-2)
model = make_model()
if not args.fix:
    # --8<-- [start:bug]
    opt = torch.optim.AdamW(trainable(model), lr=1e-2)  # before fully_shard
    # --8<-- [end:bug]
# --8<-- [start:fix]
for layer in (model[0], model[2]):  # frozen and trainable in one group: allowed
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)  # replaces every Parameter with a sharded DTensor
if args.fix:
    opt = torch.optim.AdamW(trainable(model), lr=1e-2)  # after: the new ones
# --8<-- [end:fix]
before = [p.full_tensor().clone() for p in trainable(model)]
for step in range(3):
    x, y = torch.randn(16, 32, device=device), torch.randn(16, 4, device=device)
    mine = slice(rank * 16 // world, (rank + 1) * 16 // world)
    nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
    opt.step()
    opt.zero_grad()
    nn.functional.mse_loss(ref(x), y).backward()
    opt_ref.step()
    opt_ref.zero_grad()
changed = sum(not torch.equal(b, p.full_tensor())
              for b, p in zip(before, trainable(model)))
diff = torch.tensor(max((p.full_tensor() - q).abs().max().item()
                        for p, q in zip(model.parameters(), ref.parameters())))
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
frozen_grads = sum(p.grad is not None for p in model.parameters()
                   if not p.requires_grad)
state = sum(t.to_local().numel() for s in opt.state.values() for t in s.values()
            if isinstance(t, torch.Tensor) and t.dim() > 0)
if rank == 0:
    print(f"adapters changed by 3 AdamW steps: {changed} of {len(before)}")
    print(f"frozen parameters with a gradient: {frozen_grads}")
    print(f"optimizer state elements on rank 0: {state}")
    verdict = ("< 1e-5: equal up to float32 round-off" if diff < 1e-5
               else ">= 1e-5: not what one process trains")
    print(f"max abs diff from one process: {diff.item():.1e} ({verdict})")
dist.destroy_process_group()
if args.fix and rank == 0 and not diff < 1e-5:  # the fix must give one process's result
    sys.exit("with --fix: not what one process gives")
