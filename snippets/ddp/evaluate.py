"""Metrics over all ranks: all-reduce sums and counts; uneven data: padding, drop_last
and Join."""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/evaluate.py")

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

# --8<-- [start:metric]
# 11 validation samples; 1 = the model got it right. The true accuracy is 6/11 = 0.5455.
correct = torch.tensor([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], dtype=torch.float64)


def report(name: str, shard: list[int]) -> None:
    mine = correct[shard].to(device)
    # wrong: the mean of the ranks' means weighs a sample on a small shard more
    mean = mine.mean().reshape(1)
    dist.all_reduce(mean)
    # right: add up sums and counts, divide once at the end
    sums = torch.stack([mine.sum(), torch.tensor(float(len(mine)), device=device)])
    dist.all_reduce(sums)
    if rank == 0:
        print(
            f"{name:28} {int(sums[1]):7d} {mean.item() / world_size:13.4f} "
            f"{(sums[0] / sums[1]).item():9.4f}"
        )


padded = list(DistributedSampler(correct, shuffle=False))  # pads by repeating samples
# drops the rest
dropped = list(DistributedSampler(correct, shuffle=False, drop_last=True))
# every sample exactly once, uneven shards
exact = list(range(rank, len(correct), world_size))
if rank == 0:
    print(f"{'':28} {'samples':>7} {'mean of means':>13} {'sum/count':>9}")
report("DistributedSampler (default)", padded)
report("DistributedSampler drop_last", dropped)
report("range(rank, N, world_size)", exact)
# --8<-- [end:metric]

# --8<-- [start:join]
torch.manual_seed(0)
ddp = DDP(
    nn.Linear(4, 1).to(device),
    device_ids=[device.index] if device.type == "cuda" else None,
)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
batches = 3 if rank == 0 else 2  # uneven: rank 0 has one batch more
# a rank that runs out shadows the others' all-reduces instead of leaving them waiting
with Join([ddp]):
    for _ in range(batches):
        opt.zero_grad(set_to_none=True)
        ddp(torch.randn(4, 4, device=device)).sum().backward()
        opt.step()
weights = torch.cat([p.detach().flatten() for p in ddp.parameters()])
copies = [torch.empty_like(weights) for _ in range(world_size)]
dist.all_gather(copies, weights)
steps = [None] * world_size
dist.all_gather_object(steps, batches)
if rank == 0:
    print(
        f"Join: batches per rank {steps}, replicas identical: "
        f"{all(torch.equal(c, weights) for c in copies)}"
    )
    # one process on the same batches (each rank drew the same ones): in the last
    # step only rank 0 had a batch and the joined rank added zeros to the
    # all-reduce, so that step's gradient is rank 0's divided by the world size
    torch.manual_seed(0)
    ref = nn.Linear(4, 1).to(device)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(max(steps)):
        ref_opt.zero_grad(set_to_none=True)
        ref(torch.randn(4, 4, device=device)).sum().backward()
        for p in ref.parameters():
            p.grad /= world_size / sum(step < n for n in steps)
        ref_opt.step()
    got = torch.cat([p.detach().flatten() for p in ref.parameters()])
    diff = (got - weights).abs().max().item()
    ok = diff < 1e-6
    verdict = "< 1e-6: equal up to float32 round-off" if ok else ">= 1e-6: NOT equal"
    print(f"Join vs one process, max diff {diff:.1e} ({verdict})")
    if not ok:
        sys.exit("Join's result differs from one process on the same batches")
# --8<-- [end:join]

del ddp, opt
gc.collect()
dist.destroy_process_group()
