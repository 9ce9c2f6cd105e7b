"""DDP with a parameter that gets no gradient: the second iteration raises. Run with torchrun."""

import gc
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

use_cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if use_cuda else "cpu")
if use_cuda:
    torch.cuda.set_device(device)


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
model = DDP(TwoHeads().to(device))
try:
    train(model)
except RuntimeError as e:
    if rank == 0:
        print("RuntimeError:", e)
# --8<-- [end:error]
del model
gc.collect()

# --8<-- [start:fix]
model = DDP(TwoHeads().to(device), find_unused_parameters=True)
steps = train(model)
if rank == 0:
    print(f"find_unused_parameters=True: {steps} steps done")
# --8<-- [end:fix]

# --8<-- [start:shutdown]
del model  # the DDP model first,
gc.collect()  # really gone,
dist.destroy_process_group()  # then the process group
# --8<-- [end:shutdown]
