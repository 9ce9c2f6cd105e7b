"""SyncBatchNorm: batch statistics over every process's batch, not just the local one (GPU only)."""

import copy
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):  # a GPU for every process
    torch.cuda.set_device(local_rank)
    device, backend = torch.device("cuda", local_rank), "nccl"
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
rank, world_size = dist.get_rank(), dist.get_world_size()

# --8<-- [start:convert]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
ref = copy.deepcopy(model).to(device)  # a plain copy, for the comparison below
model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)  # before wrapping in DDP
if rank == 0:
    print("converted:", type(model[1]).__name__)
try:
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
except ValueError as e:  # what the CPU gets
    if rank == 0:
        print(f"ValueError: {e}")
    dist.destroy_process_group()
    sys.exit(1)
# --8<-- [end:convert]

# --8<-- [start:compare]
g = torch.Generator().manual_seed(0)
data = torch.randn(world_size, 8, 4, generator=g) + torch.arange(world_size).view(-1, 1, 1) * 3.0
ddp(data[rank].to(device))  # train mode: statistics over all world_size * 8 samples

ref(data.reshape(-1, 4).to(device))  # one process, the whole batch, plain BatchNorm1d
err = (model[1].running_mean - ref[1].running_mean).abs().max().item()
if rank == 0:
    print(f"running_mean: SyncBatchNorm on {world_size} ranks vs BatchNorm1d on the whole batch: "
          f"max |difference| {err:.1e}")
assert err < 1e-5
# --8<-- [end:compare]

del ddp
gc.collect()
dist.destroy_process_group()
