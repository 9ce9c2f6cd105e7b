"""SyncBatchNorm in training mode refuses CPU tensors once a process group exists."""

import argparse

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# a process group of one process (in a real job: torchrun and
# init_process_group("gloo"))
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                        timeout=timedelta(seconds=30))
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
x = torch.randn(8, 3, 4, 4, device=device)

# --8<-- [start:error]
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(device)
sync = nn.SyncBatchNorm.convert_sync_batchnorm(model)
try:
    sync(x)
    print("SyncBatchNorm ran on", device)
except ValueError as e:
    print("ValueError:\n ", e)
# --8<-- [end:error]

# --8<-- [start:fix]
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(device)
if device.type == "cuda":  # convert only where SyncBatchNorm can run
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
print(type(model[1]).__name__, "on", device, "->", tuple(model(x).shape))
# --8<-- [end:fix]

dist.destroy_process_group()
