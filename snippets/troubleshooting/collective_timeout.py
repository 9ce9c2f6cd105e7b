"""A collective that only some ranks call waits until the process group's timeout. Run with torchrun."""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

use_cuda = torch.cuda.is_available()
# --8<-- [start:init]
dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=3))
# --8<-- [end:init]
rank = dist.get_rank()
device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if use_cuda else "cpu")
if use_cuda:
    torch.cuda.set_device(device)


# --8<-- [start:bug]
def log_and_sync(group=None):
    loss = torch.tensor([1.0 + rank], device=device)
    if rank == 0:  # the bug: a collective inside a branch that only rank 0 takes
        dist.all_reduce(loss, group=group)
    dist.barrier(group=group)
# --8<-- [end:bug]


def attempt(label, group=None):
    start = time.monotonic()
    try:
        log_and_sync(group)
    except RuntimeError as e:
        first = str(e).split(", TensorShape")[0]  # shortened: the full message is long
        if rank == 0:
            print(f"{label}: RuntimeError after {time.monotonic() - start:.1f} s:\n  {first}")


attempt("plain")

# --8<-- [start:detail]
dist.set_debug_level(dist.DebugLevel.DETAIL)  # or TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ...
checked = dist.new_group(timeout=timedelta(seconds=3))  # groups created now check each collective
attempt("DETAIL", checked)
# --8<-- [end:detail]

dist.destroy_process_group()
