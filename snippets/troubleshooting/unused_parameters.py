"""DDP with a parameter that gets no gradient: the second iteration raises.

Run with: torchrun --standalone --nproc-per-node=2 \
              snippets/troubleshooting/unused_parameters.py
"""

import argparse
import gc
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: torchrun --standalone --nproc-per-node=2 "
             "snippets/troubleshooting/unused_parameters.py")
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus:  # the device rule: fewer GPUs than processes here, and they share them
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)  # before any other CUDA work
    backend = "nccl" if gpus >= local_world else "gloo"  # NCCL: one GPU per process
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
rank = dist.get_rank()
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")
ids = [device.index] if device.type == "cuda" else None


# --8<-- [start:model]
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head_a = nn.Linear(4, 1)
        self.head_b = nn.Linear(4, 1)  # never used below: gets no gradient

    def forward(self, x):
        return self.head_a(self.body(x))
# --8<-- [end:model]


def train(model, steps=2):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step + 1


# --8<-- [start:error]
torch.manual_seed(0)
model = DDP(TwoHeads().to(device), device_ids=ids)
try:
    train(model)
except RuntimeError as e:
    if rank == 0:
        for line in f"RuntimeError: {e}".splitlines():  # torch's lines, wrapped
            print(textwrap.fill(line.strip(), 80, subsequent_indent="  "))
# --8<-- [end:error]
del model
gc.collect()

# --8<-- [start:fix]
model = DDP(TwoHeads().to(device), device_ids=ids, find_unused_parameters=True)
steps = train(model)
if rank == 0:
    print(f"find_unused_parameters=True: {steps} steps done")
# --8<-- [end:fix]

# --8<-- [start:shutdown]
del model  # the DDP model first,
gc.collect()  # really gone,
dist.destroy_process_group()  # then the process group
# --8<-- [end:shutdown]
