"""A collective that only some ranks call waits until the process group's timeout.

Run with: torchrun --standalone --nproc-per-node=2 \
              snippets/troubleshooting/collective_timeout.py
"""

import argparse
import os
import re
import sys
import textwrap
import time
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: torchrun --standalone --nproc-per-node=2 "
             "snippets/troubleshooting/collective_timeout.py")
if os.environ["WORLD_SIZE"] == "1":
    sys.exit(
        "one process cannot disagree with itself: run with --nproc-per-node=2 or more"
    )
# every rank first waits up to 60 s for all to start (a late start is not the bug), so
# that the short timeout below only ever meets the bug
store, rank, world = next(dist.rendezvous("env://", timeout=timedelta(seconds=60)))
store.set(f"started/{rank}", "1")
store.wait([f"started/{r}" for r in range(world)])
# --8<-- [start:init]
# gloo and CPU tensors on any machine: with NCCL, a barrier is itself a one-element
# all-reduce and would pair with rank 0's all_reduce below; the mismatch would surface
# later, as an abort.
# rank 0's timeout is the shorter, so that it gives up first in every run (the other
# rank would otherwise see only "Connection closed by peer" when its partner quits)
timeout = timedelta(seconds=3 if os.environ["RANK"] == "0" else 6)
dist.init_process_group("gloo", timeout=timeout)
device = torch.device("cpu")
# --8<-- [end:init]
rank = dist.get_rank()
if rank == 0:
    print(f"{dist.get_world_size()} processes: gloo on cpu (this demo, on any machine)")


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
        first = re.sub(r"^\[[^\]]*\.cc:\d+\] ", "", first)  # gloo's C++ source line
        if rank == 0:
            print(f"{label}: RuntimeError after {time.monotonic() - start:.1f} s:")
            print(textwrap.fill(first, 80, initial_indent="  ", subsequent_indent="  "))


attempt("plain")

# --8<-- [start:detail]
# or TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ...
dist.set_debug_level(dist.DebugLevel.DETAIL)
# groups created now check each collective
checked = dist.new_group(timeout=timeout)
attempt("DETAIL", checked)
# --8<-- [end:detail]

dist.destroy_process_group()
