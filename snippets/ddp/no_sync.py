"""Gradient accumulation: no_sync() skips the all-reduce until the last micro-batch."""

import argparse
import contextlib
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/no_sync.py")

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

ACCUM, MICRO = 4, 4  # 4 micro-batches of 4 samples per rank make one optimizer step
g = torch.Generator().manual_seed(0)
X, Y = torch.randn(world_size, ACCUM, MICRO, 8, generator=g), torch.randn(
    world_size, ACCUM, MICRO, 1, generator=g
)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

# --8<-- [start:count]
calls = {"all-reduces": 0, "bytes": 0}


# a DDP communication hook: called once per bucket
def counting_allreduce(state, bucket):
    calls["all-reduces"] += 1
    calls["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    return allreduce_hook(state, bucket)  # then do what DDP does by default


ddp.register_comm_hook(None, counting_allreduce)
# --8<-- [end:count]


def grads() -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def max_diff_across_ranks(t: torch.Tensor) -> float:
    copies = [torch.empty_like(t) for _ in range(world_size)]
    dist.all_gather(copies, t)
    return max((c - t).abs().max().item() for c in copies)


# --8<-- [start:accumulate]
def accumulate(skip_sync: bool) -> list[float]:
    ddp.zero_grad(set_to_none=True)
    diffs = []
    for k in range(ACCUM):
        last = k == ACCUM - 1
        ctx = ddp.no_sync() if skip_sync and not last else contextlib.nullcontext()
        with ctx:  # inside no_sync(): backward only adds to the local .grad
            x, y = X[rank, k].to(device), Y[rank, k].to(device)
            (nn.functional.mse_loss(ddp(x), y) / ACCUM).backward()
        diffs.append(max_diff_across_ranks(grads()))
    return diffs
# --8<-- [end:accumulate]


# --8<-- [start:compare]
for skip_sync in (False, True):
    calls.update({"all-reduces": 0, "bytes": 0})
    diffs = accumulate(skip_sync)
    if rank == 0:
        print(f"no_sync on the first {ACCUM - 1} micro-batches: {skip_sync}")
        print(
            "  grads differ across ranks after each micro-batch:",
            [d > 0 for d in diffs],
        )
        print(
            f"  {calls['all-reduces']} all-reduce(s), {calls['bytes']} bytes of "
            "gradients all-reduced"
        )
    assert (
        diffs[-1] == 0.0
    ), "after the synced backward every rank holds the same gradient"

# One process, the full batch: the mean over all ranks' samples of each micro-batch,
# accumulated.
ref = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
ref.load_state_dict(model.state_dict())
for k in range(ACCUM):
    x, y = X[:, k].reshape(-1, 8).to(device), Y[:, k].reshape(-1, 1).to(device)
    (nn.functional.mse_loss(ref(x), y) / ACCUM).backward()
full = torch.cat([p.grad.flatten() for p in ref.parameters()])
err = (full - grads()).abs().max().item()
if rank == 0:  # the verdict says what the figure shows
    verdict = ("< 1e-6: equal up to float32 round-off" if err < 1e-6
               else ">= 1e-6: NOT equal, more than round-off")
    print(f"max |accumulated DDP gradient - full-batch gradient|: {err:.1e}\n"
          f"  ({verdict})")
assert err < 1e-6, "the accumulated gradient differs from the full batch's"
# --8<-- [end:compare]

del ddp
gc.collect()
dist.destroy_process_group()
