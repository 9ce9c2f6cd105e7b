"""SyncBatchNorm: batch statistics over every process's batch, not just the local one
(GPU only)."""

import argparse
import copy
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/syncbn.py")

local_rank = int(os.environ["LOCAL_RANK"])
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before any other CUDA work
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world_size)]))
own = b"cpu" not in devices and len(devices) == world_size  # a GPU of its own each
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                        timeout=timeout)
if rank == 0:  # which case of the device rule ran
    where = "the CPU" if b"cpu" in devices else f"{len(devices)} GPU(s)"
    print(f"{world_size} processes on {where}: {backend}")

# --8<-- [start:convert]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
ref = copy.deepcopy(model).to(device)  # a plain copy, for the comparison below
# before wrapping in DDP
model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)
if rank == 0:
    print("converted:", type(model[1]).__name__)
try:
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
except ValueError as e:  # what the CPU gets
    if rank == 0:
        print(f"ValueError: {e}")
    dist.destroy_process_group()
    sys.exit(1)
# --8<-- [end:convert]

# --8<-- [start:compare]
g = torch.Generator().manual_seed(0)
data = (
    torch.randn(world_size, 8, 4, generator=g)
    + torch.arange(world_size).view(-1, 1, 1) * 3.0
)
ddp(data[rank].to(device))  # train mode: statistics over all world_size * 8 samples

ref(data.reshape(-1, 4).to(device))  # one process, the whole batch, plain BatchNorm1d
err = (model[1].running_mean - ref[1].running_mean).abs().max().item()
if rank == 0:  # the verdict says what the figure shows
    verdict = ("< 1e-5: equal up to float32 round-off" if err < 1e-5
               else ">= 1e-5: NOT equal, more than round-off")
    print(
        f"running_mean: SyncBatchNorm on {world_size} ranks vs BatchNorm1d on the "
        f"whole batch: max |difference| {err:.1e} ({verdict})"
    )
assert err < 1e-5, "SyncBatchNorm's statistics differ from the whole batch's"
# --8<-- [end:compare]

del ddp
gc.collect()
dist.destroy_process_group()
