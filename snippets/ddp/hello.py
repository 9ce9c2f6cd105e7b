"""One process per device: join the process group, say who you are, leave cleanly.

Run with: torchrun --standalone --nproc-per-node=2 snippets/ddp/hello.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                    help="auto: the device rule below; gloo: also for CUDA tensors")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/hello.py")

# --8<-- [start:setup]
rank = int(os.environ["RANK"])  # set by the launcher (torchrun) for every process
local_rank = int(os.environ["LOCAL_RANK"])  # its number on its own machine
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus:  # fewer GPUs than processes on this machine: processes share GPUs
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)  # before anything else touches the GPU
    backend = "nccl" if gpus >= local_world else "gloo"  # NCCL: one GPU per process
else:
    device, backend = torch.device("cpu"), "gloo"
if args.backend != "auto":
    backend = args.backend
# MASTER_ADDR and MASTER_PORT (also set by torchrun) say where to meet.
dist.init_process_group(backend, timeout=timedelta(seconds=60))
if rank == 0:
    procs = f"{local_world} process{'es' * (local_world > 1)}"
    where = f"{gpus} GPU{'s' * (gpus > 1)}" if gpus else "the CPU"
    verb = "share" if gpus and gpus < local_world else "on"
    print(f"{procs} {verb} {where} on this node: {backend}")
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
