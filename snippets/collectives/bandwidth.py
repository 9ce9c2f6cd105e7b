"""Algorithm and bus bandwidth of dist.all_reduce, measured on this machine for a few
sizes, as nccl-tests defines them.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 \
         snippets/collectives/bandwidth.py
"""

import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=4 snippets/collectives/bandwidth.py")
if int(os.environ["WORLD_SIZE"]) < 2:
    sys.exit("run with at least 2 processes: one process's all-reduce moves nothing")

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
    what = f"nccl on {torch.cuda.get_device_name()}, one GPU per process"
else:  # the CPU, as the other programs of this chapter
    device, backend = torch.device("cpu"), "gloo"
    what = ("gloo on the CPU,\n  processes of one machine over its loopback: "
            "not a GPU figure")
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))


def sync() -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()  # CUDA runs asynchronously: wait, then read a clock


# --8<-- [start:measure]
factor = 2 * (world - 1) / world  # ring all-reduce: bytes on the busiest link / size
if rank == 0:
    print(f"dist.all_reduce, {world} processes, {what}")
    print(f"busbw = algbw * 2(n-1)/n = algbw * {factor:.2f}")
for size, label, iters in [(4 * 2**10, "4 KiB", 50), (256 * 2**10, "256 KiB", 20),
                           (16 * 2**20, "16 MiB", 5)]:
    buf = torch.ones(size // 4, device=device)  # float32
    for _ in range(2):  # warm up: connections, buffers
        dist.all_reduce(buf)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync()
    t = torch.tensor([(time.perf_counter() - start) / iters])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time per call
    t = t.item()
    algbw = size / t / 1e9  # GB/s, as nccl-tests prints them
    if rank == 0:
        print(f"{label:>8}: busbw {algbw * factor:.3f} GB/s, "
              f"algbw {algbw:.3f} GB/s, {t * 1e6:.0f} us per all-reduce")
# --8<-- [end:measure]

dist.destroy_process_group()
