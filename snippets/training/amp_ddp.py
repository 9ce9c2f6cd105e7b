"""Mixed precision under DDP: one rank's fp16 overflow skips the step on every rank."""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

if "LOCAL_RANK" not in os.environ:
    print("run me with: torchrun --standalone --nproc-per-node=2 "
          "snippets/training/amp_ddp.py", file=sys.stderr)
    sys.exit(2)
parser = argparse.ArgumentParser()
parser.add_argument("--dtype", nargs="+", choices=["bf16", "fp16"],
                    default=["fp16", "bf16"])
args = parser.parse_args()

local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])
gpus = torch.cuda.device_count()
if gpus:  # ranks share GPUs when there are fewer GPUs than ranks on this node
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)  # before any other CUDA work
    backend = "nccl" if gpus >= local_world else "gloo"  # NCCL: one GPU per rank
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 0:  # which case of the device rule ran
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")

def train(name: str) -> None:
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(ddp_model.parameters(), lr=1e-2)
    torch.manual_seed(1 + rank)  # each rank its own data
    x = torch.randn(64, 16, device=device)
    y = x.sum(-1, keepdim=True)

    # --8<-- [start:loop]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[name]
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    for step in range(8):
        opt.zero_grad(set_to_none=True)
        bad = step == 4 and rank == 0  # one bad batch, on rank 0 only
        with torch.autocast(device.type, dtype=dtype):
            loss = nn.functional.mse_loss(ddp_model(x * (1e4 if bad else 1.0)), y)
        scaler.scale(loss).backward()  # DDP all-reduces the scaled grads: an inf on one
        # rank becomes an inf on every rank, so every rank makes the same skip decision
        scale = scaler.get_scale() if scaler.is_enabled() else 1.0
        scaler.step(opt)
        scaler.update()
        new_scale = scaler.get_scale() if scaler.is_enabled() else 1.0
        decisions = [None] * world
        dist.all_gather_object(decisions, "skip" if new_scale < scale else "step")
        if rank == 0:
            shown = f"{scale:>6.0f}" if scaler.is_enabled() else "   off"
            print(f"step {step}: loss on rank 0 {loss.item():10.3g}  scale {shown}"
                  f"  ranks: {' '.join(decisions)}")
    # --8<-- [end:loop]

    # every rank holds the same weights after training
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    w0 = w.clone()
    dist.broadcast(w0, src=0)
    assert torch.equal(w, w0), "replicas diverged"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    if rank == 0:
        print(f"{name}: all {world} replicas identical, parameters stay float32")
    del ddp_model, opt
    gc.collect()


for name in args.dtype:
    train(name)
dist.destroy_process_group()
