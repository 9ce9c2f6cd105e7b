"""LOCAL_RANK, LOCAL_WORLD_SIZE and CUDA_VISIBLE_DEVICES in each torchrun worker.

Run with: torchrun --standalone --nproc-per-node=2 snippets/production/local_rank.py
and again with torchrun --virtual-local-rank.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: torchrun --standalone "
             "--nproc-per-node=2 snippets/production/local_rank.py")

# --8<-- [start:see]
env = {k: os.environ.get(k, "(unset)") for k in
       ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES")}
local_rank = int(env["LOCAL_RANK"])
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = f"cuda:{local_rank % gpus}" if gpus else "cpu"  # the DDP page's rule
# The process's place on its node, whatever LOCAL_RANK says: torchrun numbers the
# processes of a node consecutively, with --nproc-per-node the same on every node
place = int(env["RANK"]) % int(env["LOCAL_WORLD_SIZE"])
# --8<-- [end:see]

# --8<-- [start:show]
dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # no tensors sent
everyone = [None] * dist.get_world_size()
dist.all_gather_object(everyone, (env, gpus, device, place))
if dist.get_rank() == 0:
    for env, gpus, device, place in everyone:
        print(f"rank {env['RANK']}: LOCAL_RANK={env['LOCAL_RANK']} "
              f"LOCAL_WORLD_SIZE={env['LOCAL_WORLD_SIZE']} "
              f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}")
        print(f"  sees {gpus} GPU(s), uses {device}; place on its node: {place}")
dist.destroy_process_group()
# --8<-- [end:show]
