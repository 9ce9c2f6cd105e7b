"""A parameter that gets no gradient: the error without find_unused_parameters, its cost
with it."""

import argparse
import gc
import os
import sys
import textwrap
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/unused.py")

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
ids = [device.index] if device.type == "cuda" else None


# --8<-- [start:model]
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head_a = nn.Linear(8, 1)
        self.head_b = nn.Linear(8, 1)  # parameters 4 and 5: only used when task == "b"

    def forward(self, x, task="a"):
        h = torch.relu(self.body(x))
        return self.head_a(h) if task == "a" else self.head_b(h)
# --8<-- [end:model]


def steps(model: nn.Module, n: int) -> None:
    for _ in range(n):
        model(torch.randn(4, 8, device=device)).sum().backward()


# --8<-- [start:error]
torch.manual_seed(0)
ddp = DDP(TwoHeads().to(device), device_ids=ids)
try:
    steps(ddp, 2)  # the first step passes; the second finds the first one unfinished
except RuntimeError as e:
    if rank == 0:
        lines = str(e).splitlines()
        print(textwrap.fill(f"RuntimeError: {lines[0].split('. ')[0]}.", 80,
                            subsequent_indent="  "))
        print(next(l for l in lines if l.startswith("Parameter indices")))
# --8<-- [end:error]

# --8<-- [start:fixes]
torch.manual_seed(0)
found = DDP(TwoHeads().to(device), device_ids=ids, find_unused_parameters=True)
steps(found, 3)
torch.manual_seed(0)
static = DDP(TwoHeads().to(device), device_ids=ids, static_graph=True)
steps(static, 3)
if rank == 0:
    print("find_unused_parameters=True: 3 steps done")
    print("static_graph=True: 3 steps done")
# --8<-- [end:fixes]


# --8<-- [start:cost]
# the same unused head, behind 40 layers that are all used
class DeepTwoHeads(TwoHeads):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(*[nn.Linear(8, 8) for _ in range(40)])


def ms_per_step(**kwargs) -> float:
    torch.manual_seed(0)
    model = DDP(DeepTwoHeads().to(device), device_ids=ids, **kwargs)
    steps(model, 3)  # warm-up (static_graph learns the graph in its first step)
    if device.type == "cuda":
        torch.cuda.synchronize()  # the clock must not start while GPU work is queued
    dist.barrier()
    t0 = time.perf_counter()
    steps(model, 20)
    if device.type == "cuda":
        torch.cuda.synchronize()  # ... nor stop before it is done
    return (time.perf_counter() - t0) / 20 * 1e3


searching, static_ms = ms_per_step(find_unused_parameters=True), ms_per_step(
    static_graph=True
)
if rank == 0:
    print(f"find_unused_parameters=True: {searching:.2f} ms/step")
    print(f"static_graph=True:           {static_ms:.2f} ms/step")
# --8<-- [end:cost]

del ddp, found, static
gc.collect()
dist.destroy_process_group()
