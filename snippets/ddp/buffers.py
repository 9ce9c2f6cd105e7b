"""Buffers under DDP: rank 0's are copied to every rank before each forward, by default.

Run with: torchrun --standalone --nproc-per-node=2 snippets/ddp/buffers.py
"""

import argparse
import gc
import inspect
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/buffers.py")
local_rank = int(os.environ["LOCAL_RANK"])
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before any other CUDA work
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
own = b"cpu" not in devices and len(devices) == world  # a GPU of its own each
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        timeout=timeout)
if rank == 0:  # which case of the device rule ran
    where = "the CPU" if b"cpu" in devices else f"{len(devices)} GPU(s)"
    print(f"{world} processes on {where}: {backend}")


# --8<-- [start:model]
class Seen(nn.Module):
    """BatchNorm that notes the running mean it starts each forward with."""

    def __init__(self):
        super().__init__()
        self.bn, self.seen = nn.BatchNorm1d(1), []

    def forward(self, x):
        self.seen.append(self.bn.running_mean.item())
        return self.bn(x)
# --8<-- [end:model]


# --8<-- [start:compare]
ids = [device.index] if device.type == "cuda" else None
# torch 2.13 renamed broadcast_buffers; older versions know only that name
NEW = "forward_sync_buffers" in inspect.signature(DDP).parameters
SYNC = "forward_sync_buffers" if NEW else "broadcast_buffers"
for sync in (True, False):
    model = Seen().to(device)
    ddp = DDP(model, device_ids=ids, **{SYNC: sync})
    for step in range(3):  # each rank's data has its own mean: 10 * rank
        x = torch.arange(4.0, device=device).view(4, 1) + 10.0 * rank
        ddp(x).sum().backward()
    starts = [None] * world
    dist.all_gather_object(starts, model.seen)
    if rank == 0:
        print(f"{SYNC}={sync}: running_mean at the start of each forward")
        for r, seen in enumerate(starts):
            print(f"  rank {r}: " + ", ".join(f"{m:.3f}" for m in seen))
    del ddp
    gc.collect()
one = DDP(Seen().to(device), device_ids=ids)  # every rank: construction is collective
if rank == 0:  # where forward's output lands: device_ids[0], or None on the CPU
    print("output_device:", one.output_device)
with warnings.catch_warnings(record=True) as caught:  # the old name still works
    warnings.simplefilter("always")
    old = DDP(Seen().to(device), device_ids=ids, broadcast_buffers=False)
if rank == 0 and NEW:
    print("broadcast_buffers=False:", caught[0].category.__name__,
          str(caught[0].message).split(".")[0])
elif rank == 0:
    print(f"broadcast_buffers=False: torch {torch.__version__} has no other name")
# --8<-- [end:compare]

del one, old
gc.collect()
dist.destroy_process_group()
