"""The same training loop with DataParallel and with DistributedDataParallel, side by
side.

Run with: torchrun --standalone --nproc-per-node=2 snippets/dp/dp_vs_ddp.py
Rank 0 also runs the DataParallel version and checks that both end with the same
weights.
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/dp/dp_vs_ddp.py")
torch.manual_seed(0)
dataset = TensorDataset(torch.randn(100, 5), torch.randn(100, 1))
BATCH = 30  # the global batch: what one optimizer step sees in both versions


# --8<-- [start:common]
def make_model():
    torch.manual_seed(1)  # the same initial weights everywhere
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1))


def train(model, loader, device, average_loss=lambda loss: loss):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(average_loss(loss.detach()).item())
    return losses
# --8<-- [end:common]


# --8<-- [start:dp]
def train_dp(device, replicas):
    model = make_model().to(device)
    if device.type == "cuda":  # one process drives every replica, one thread each
        gpus = torch.cuda.device_count()  # fewer GPUs than replicas: replicas share
        model = nn.DataParallel(model, device_ids=[i % gpus for i in range(replicas)])
    loader = DataLoader(dataset, batch_size=BATCH)  # whole batches; DP splits each one
    losses = train(model, loader, device)
    inner = model.module if isinstance(model, nn.DataParallel) else model
    return losses, inner
# --8<-- [end:dp]


# --8<-- [start:ddp]
def train_ddp(device):
    rank, world = dist.get_rank(), dist.get_world_size()
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(make_model().to(device), device_ids=ids)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    # this rank's share
    loader = DataLoader(dataset, batch_size=BATCH // world, sampler=sampler)

    def average_loss(loss):  # for printing only: DDP already averages the gradients
        dist.all_reduce(loss)
        return loss / world

    losses = train(model, loader, device, average_loss)
    return losses, model
# --8<-- [end:ddp]


# --8<-- [start:main]
world = int(os.environ["WORLD_SIZE"])
if BATCH % world or len(dataset) % world:  # else the two versions see different batches
    if os.environ["RANK"] == "0":  # one line, not one per process
        print(f"world size {world}: use one that divides both the batch ({BATCH}) and "
              f"the data set ({len(dataset)}): 1, 2, 5 or 10", file=sys.stderr)
    sys.exit(2)
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])
gpus = torch.cuda.device_count()
if gpus:  # the device rule of the DDP chapter
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)
    backend = "nccl" if gpus >= local_world else "gloo"
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
if dist.get_rank() == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")
ddp_losses, ddp_model = train_ddp(device)
if dist.get_rank() == 0:
    dp_losses, dp_model = train_dp(device, replicas=world)
    for i, (a, b) in enumerate(zip(dp_losses, ddp_losses), 1):
        print(f"step {i}: DataParallel loss {a:.4f} | "
              f"DDP on {world} processes loss {b:.4f}")
    diff = max((p.detach().cpu() - q.detach().cpu()).abs().max().item()
               for p, q in zip(dp_model.parameters(), ddp_model.module.parameters()))
    verdict = ("< 1e-5: equal up to float32 round-off" if diff < 1e-5
               else ">= 1e-5: NOT equal, more than round-off")  # what the figure shows
    print(f"final weights, max abs diff: {diff:.1e} ({verdict})")
    assert diff < 1e-5, f"DP and DDP disagree: {diff}"
del ddp_model
gc.collect()
dist.destroy_process_group()
# --8<-- [end:main]
