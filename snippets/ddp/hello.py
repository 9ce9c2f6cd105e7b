"""One process per device: join the process group, say who you are, leave cleanly."""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

# --8<-- [start:setup]
rank = int(os.environ["RANK"])  # set by the launcher (torchrun) for every process
local_rank = int(os.environ["LOCAL_RANK"])  # the process's number on its own machine
world_size = int(os.environ["WORLD_SIZE"])

if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):  # a GPU for every process
    torch.cuda.set_device(local_rank)  # before anything touches the GPU
    device, backend = torch.device("cuda", local_rank), "nccl"
else:
    device, backend = torch.device("cpu"), "gloo"

# MASTER_ADDR and MASTER_PORT (also set by torchrun) say where to meet.
dist.init_process_group(backend, timeout=timedelta(seconds=60))
# --8<-- [end:setup]

# --8<-- [start:talk]
me = {"rank": dist.get_rank(), "local_rank": local_rank, "device": str(device),
      "node": int(os.environ["GROUP_RANK"])}
everyone = [None] * world_size
dist.all_gather_object(everyone, me)  # every rank sends its dict to every rank

x = torch.tensor([float(rank + 1)], device=device)
dist.all_reduce(x)  # sum over ranks, the result lands on every rank

if rank == 0:  # print once, not once per process
    print(f"backend {dist.get_backend()}, world size {dist.get_world_size()}")
    for p in everyone:
        print(p)
    print("all_reduce sum of rank+1:", x.item())
    print("MASTER_ADDR and MASTER_PORT set:", "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ)
# --8<-- [end:talk]

# --8<-- [start:cleanup]
dist.destroy_process_group()
# --8<-- [end:cleanup]
