"""Why is DDP slower than one GPU? Time per step: data loading, forward+backward
and communication, for one process and for all of them, and which part grew.

Rank 0 first trains alone (a process group of one), then every rank trains together,
with the same batch per process. Each step is timed around next(iterator) (data),
forward+backward inside no_sync() (no all-reduce: compute only), and forward+backward
with the all-reduce; the difference of the last two is the communication that
backward did not hide.
"""

import argparse
import contextlib
import gc
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--steps", type=int, default=5, help="timed steps of each kind")
parser.add_argument("--width", type=int, default=768,
                    help="model width (parameters: about 4*width^2)")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/slow.py")

local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus:  # fewer GPUs than processes here: the processes share them
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)  # before any other CUDA work
    backend = "nccl" if gpus >= local_world else "gloo"  # NCCL: one GPU per process
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
rank, world_size = dist.get_rank(), dist.get_world_size()
if rank == 0:  # which case of the device rule ran
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")


class Samples(Dataset):
    """Each sample is made on the fly, as a decoding dataset would."""

    def __len__(self):
        return 1 << 16

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(args.width, generator=g)
        return x, x.sum(0, keepdim=True)


def now() -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()  # GPU work is asynchronous: wait for it first
    return time.perf_counter()


# --8<-- [start:split]
def split_step(ddp: DDP, group: dist.ProcessGroup) -> dict[str, float]:
    """Seconds per step: data, forward+backward, communication (the fastest of the
    timed steps: the one least disturbed by other work on the machine)."""
    sampler = DistributedSampler(Samples(), num_replicas=group.size(),
                                 rank=group.rank(), shuffle=False)
    batches = iter(DataLoader(Samples(), batch_size=8, sampler=sampler))
    times = {"data": [], "compute": [], "compute+comm": []}
    for step in range(2 * args.steps + 2):  # two untimed warm-up steps
        t0 = now()
        x, y = next(batches)  # data: loading and collating one batch
        x, y = x.to(device), y.to(device)
        t1 = now()
        synced = step % 2 == 1  # every other step without the all-reduce
        ctx = contextlib.nullcontext() if synced else ddp.no_sync()
        with ctx:
            nn.functional.mse_loss(ddp(x), y).backward()
        t2 = now()
        ddp.zero_grad(set_to_none=True)
        if step >= 2:
            times["data"].append(t1 - t0)
            times["compute+comm" if synced else "compute"].append(t2 - t1)
    best = {k: min(v) for k, v in times.items()}
    return {"data loading": best["data"], "forward+backward": best["compute"],
            "communication": max(best["compute+comm"] - best["compute"], 0.0)}
# --8<-- [end:split]


def model() -> nn.Module:
    torch.manual_seed(0)
    w = args.width
    layers = [nn.Linear(w, w) for _ in range(4)] + [nn.Linear(w, 1)]
    return nn.Sequential(*layers).to(device)


ids = [device.index] if device.type == "cuda" else None
solo = dist.new_group([0])  # every rank takes part in creating a group, even a group
# it is not in
if rank == 0:
    one = split_step(DDP(model(), device_ids=ids, process_group=solo), solo)
dist.barrier()  # the other ranks wait while rank 0 trains alone
if world_size == 1:
    print("1 process: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in one.items()))
    print("nothing to compare with: start 2 or more processes (--nproc-per-node=2)")
    dist.destroy_process_group()
    sys.exit(0)
many = split_step(DDP(model(), device_ids=ids), dist.group.WORLD)

# --8<-- [start:report]
if rank == 0:
    params = sum(p.numel() for p in model().parameters())  # a fresh copy, to count
    print(f"model: {params / 1e6:.1f}M parameters, {params * 4 / 2**20:.0f} MiB of "
          "gradients to all-reduce per step; 8 samples per process per step")
    print(f"{'per step':18}{'1 process':>12}{f'{world_size} processes':>14}")
    for part in one:
        print(f"{part:18}{one[part] * 1e3:9.1f} ms{many[part] * 1e3:11.1f} ms")
    t1, tn = sum(one.values()), sum(many.values())
    print(f"{'step':18}{t1 * 1e3:9.1f} ms{tn * 1e3:11.1f} ms")
    grew = max(one, key=lambda part: many[part] - one[part])
    print(f"grew the most: {grew} (+{(many[grew] - one[grew]) * 1e3:.1f} ms per step)")
    speedup = world_size * t1 / tn
    print(f"{world_size} processes: {speedup:.1f}x the samples per second of one")
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
