"""One process per device: join the process group, say who you are, leave cleanly.

Run with: torchrun --standalone --nproc-per-node=2 snippets/ddp/hello.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/hello.py")

# --8<-- [start:setup]
local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun: its number on its machine
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before anything else touches the GPU
# MASTER_ADDR and MASTER_PORT (also set by torchrun) say where the job's key-value store
# is; RANK and WORLD_SIZE, who this process is and how many there are.
timeout = timedelta(seconds=60)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
# Does every process have a GPU of its own? Indices cannot tell (a launcher may show
# each process only its own GPU, as cuda:0); UUIDs can. Each posts its own, reads all.
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
own = b"cpu" not in devices and len(devices) == world  # NCCL needs one GPU per process
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        timeout=timeout)
if rank == 0:  # which case of the rule ran: "2 processes on 1 GPU(s): gloo" = sharing
    where = "the CPU" if b"cpu" in devices else f"{len(devices)} GPU(s)"
    print(f"{world} processes on {where}: {backend}")
# --8<-- [end:setup]

# --8<-- [start:talk]
me = {"rank": dist.get_rank(), "local_rank": local_rank, "device": str(device),
      "node": int(os.environ["GROUP_RANK"])}
everyone = [None] * dist.get_world_size()
dist.all_gather_object(everyone, me)  # every rank sends its dict to every rank

x = torch.tensor([float(rank + 1)], device=device)
dist.all_reduce(x)  # sum over ranks, the result lands on every rank

if rank == 0:  # print once, not once per process
    print(f"backend {dist.get_backend()}, world size {dist.get_world_size()}")
    for p in everyone:
        print(p)
    print("all_reduce sum of rank+1:", x.item())
    print("MASTER_ADDR and MASTER_PORT set:",
          "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ)
# --8<-- [end:talk]

# --8<-- [start:cleanup]
dist.destroy_process_group()
# --8<-- [end:cleanup]
