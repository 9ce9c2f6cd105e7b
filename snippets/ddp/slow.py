"""Why is DDP slower than one GPU? Time data loading, forward+backward and
communication per step, with one process and with all, and measure samples per second.

Rank 0 first trains alone (a process group of one), then every rank trains together,
with the same batch per process. Steps are timed around next(iterator) (data),
forward+backward inside no_sync() (compute only), and forward+backward with the
all-reduce: the difference is the communication that backward did not hide. Then
whole steps in a row: the plain model (no DDP) alone, and DDP on every rank.
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
parser.add_argument("--timeout", type=float, default=60,
                    help="seconds a collective may wait (default 60). The other ranks "
                    "wait in one while rank 0 trains alone: raise it with --steps, "
                    "--width or a slow first start of CUDA")
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
dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
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


def loader(group: dist.ProcessGroup) -> DataLoader:
    sampler = DistributedSampler(Samples(), num_replicas=group.size(),
                                 rank=group.rank(), shuffle=False)
    return DataLoader(Samples(), batch_size=8, sampler=sampler)


def now() -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()  # GPU work is asynchronous: wait for it first
    return time.perf_counter()


# --8<-- [start:split]
def split_step(ddp: DDP, group: dist.ProcessGroup) -> dict[str, float]:
    """Seconds per step: data, forward+backward, communication (the fastest of the
    timed steps: the one least disturbed by other work on the machine)."""
    batches = iter(loader(group))  # DistributedSampler: 1/group.size() of the data
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


def samples_per_second(net: nn.Module, group: dist.ProcessGroup) -> float:
    batches = iter(loader(group))  # whole steps in a row, after two warm-up steps
    for step in range(2 * args.steps + 2):
        if step == 2:
            t0 = now()
        x, y = next(batches)
        nn.functional.mse_loss(net(x.to(device)), y.to(device)).backward()
        net.zero_grad(set_to_none=True)
    return 2 * args.steps * 8 * group.size() / (now() - t0)


def model() -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(args.width, args.width) for _ in range(4)]
    layers.append(nn.Linear(args.width, 1))
    return nn.Sequential(*layers).to(device)


ids = [device.index] if device.type == "cuda" else None
solo = dist.new_group([0])  # every rank creates the group, even the ranks not in it
if rank == 0:  # DDP over a group of one: the same code path as below, with one process
    one = split_step(DDP(model(), device_ids=ids, process_group=solo), solo)
    plain = samples_per_second(model(), solo)  # and the plain model, without DDP
dist.barrier()  # the other ranks wait (--timeout) while rank 0 trains alone
if world_size == 1:
    print("1 process: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in one.items()))
    print("nothing to compare with: start 2 or more processes (--nproc-per-node=2)")
    dist.destroy_process_group()
    sys.exit(0)
many = split_step(DDP(model(), device_ids=ids), dist.group.WORLD)
rate = samples_per_second(DDP(model(), device_ids=ids), dist.group.WORLD)

# --8<-- [start:report]
if rank == 0:
    params = sum(p.numel() for p in model().parameters())  # a fresh copy, to count
    print(f"model: {params / 1e6:.1f}M parameters, {params * 4 / 2**20:.0f} MiB of "
          "gradients to all-reduce per step;\n  8 samples per process per step")
    print(f"steps per epoch: {len(loader(solo))} for 1 process, "
          f"{len(loader(dist.group.WORLD))} for each of {world_size}")
    print(f"{'per step':18}{'1 process':>12}{f'{world_size} processes':>14}")
    for part in one:
        print(f"{part:18}{one[part] * 1e3:9.1f} ms{many[part] * 1e3:11.1f} ms")
    t1, tn = sum(one.values()), sum(many.values())
    print(f"{'step':18}{t1 * 1e3:9.1f} ms{tn * 1e3:11.1f} ms")
    # every part, in a fixed order: which one grew most is for the reader to see
    print("grew by: " + ", ".join(f"{part} {(many[part] - one[part]) * 1e3:+.1f} ms"
                                  for part in one))
    print(f"measured, {2 * args.steps} steps in a row: 1 process without DDP "
          f"{plain:.0f} samples/s,\n  {world_size} processes {rate:.0f} samples/s")
    print(f"{world_size} processes: {rate / plain:.1f}x the samples per second of one")
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
