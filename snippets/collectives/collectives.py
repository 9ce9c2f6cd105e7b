"""Six collectives, each shown as what every rank holds before and after it.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 \
         snippets/collectives/collectives.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=4 snippets/collectives/collectives.py")
if int(os.environ["WORLD_SIZE"]) < 2:  # send/recv below needs a neighbour
    sys.exit("run with at least 2 processes: a collective of one process moves nothing")

# --8<-- [start:setup]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo's send/recv fail on CUDA tensors ('Bad address'): use the CPU
    device, backend = torch.device("cpu"), "gloo"
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")
# --8<-- [end:setup]
# torch 2.13 deprecates the old names; older releases have only those
all_gather_single = (getattr(dist, "all_gather_single", None)
                     or dist.all_gather_into_tensor)
reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                         or dist.reduce_scatter_tensor)


# --8<-- [start:show]
def rows(t: torch.Tensor) -> list | None:
    """Every rank's tensor, in rank order, on rank 0 (None elsewhere)."""
    got = [None] * world if rank == 0 else None
    dist.gather_object(t.tolist(), got, dst=0)
    return got


def show(title: str, before: list | None, after: torch.Tensor) -> None:
    after = rows(after)  # a collective itself: every rank must call it
    if rank == 0:
        print(title)
        for r in range(world):
            print(f"  rank {r}: {before[r]} -> {after[r]}")


def mine() -> torch.Tensor:
    """Rank r holds 10r, 10r+1, ...: the tens say whose element it is."""
    return 10 * rank + torch.arange(world, device=device)
# --8<-- [end:show]


# --8<-- [start:all_reduce]
t = mine()
before = rows(t)
dist.all_reduce(t, op=dist.ReduceOp.SUM)  # in place, on every rank
show("all_reduce (sum): every rank gets the element-wise sum", before, t)
# --8<-- [end:all_reduce]

# --8<-- [start:broadcast]
t = mine()
before = rows(t)
dist.broadcast(t, src=0)  # in place: rank 0's tensor overwrites everyone's
show("broadcast from rank 0: every rank gets rank 0's tensor", before, t)
# --8<-- [end:broadcast]

# --8<-- [start:all_gather]
t = mine()[:2]  # each rank contributes two elements
out = torch.empty(2 * world, dtype=t.dtype, device=device)
before = rows(t)
all_gather_single(out, t)  # rank 0's, then rank 1's, ...
show("all_gather: every rank gets all ranks' tensors, in rank order", before, out)
# --8<-- [end:all_gather]

# --8<-- [start:reduce_scatter]
t = mine()
out = torch.empty(1, dtype=t.dtype, device=device)
before = rows(t)
reduce_scatter_single(out, t, op=dist.ReduceOp.SUM)  # rank r: sum of element r
show("reduce_scatter (sum): rank r gets element r of the sum", before, out)
# --8<-- [end:reduce_scatter]

# --8<-- [start:all_to_all]
t = mine()
out = torch.empty_like(t)
before = rows(t)
dist.all_to_all_single(out, t)  # element j of rank r goes to rank j, slot r
show("all_to_all: rank r gets element r of every rank (a transpose)", before, out)
# --8<-- [end:all_to_all]

# --8<-- [start:send_recv]
t = mine()
out = torch.empty_like(t)
before = rows(t)
right, left = (rank + 1) % world, (rank - 1) % world
req = dist.isend(t, dst=right)  # start sending, don't wait for the receiver ...
dist.recv(out, src=left)  # ... so that every rank can receive at the same time
req.wait()
show("send/recv to the right: rank r gets rank r-1's tensor", before, out)
# --8<-- [end:send_recv]

dist.destroy_process_group()
