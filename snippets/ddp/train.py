"""A complete DDP training script, and the proof that it trains exactly like one
process."""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# --8<-- [start:setup]
argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/train.py")

local_rank = int(os.environ["LOCAL_RANK"])
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before any other CUDA work
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world_size)]))
own = b"cpu" not in devices and len(devices) == world_size  # a GPU of its own each
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                        timeout=timeout)
if rank == 0:  # which case of the device rule ran
    where = "the CPU" if b"cpu" in devices else f"{len(devices)} GPU(s)"
    print(f"{world_size} processes on {where}: {backend}")
# --8<-- [end:setup]

# --8<-- [start:data]
g = torch.Generator().manual_seed(0)  # the same data in every process
X = torch.randn(64, 8, generator=g)
Y = X @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(64, 1, generator=g)
dataset = TensorDataset(X, Y)
BATCH, EPOCHS = 8, 3  # per process: a step sees BATCH * world_size samples in all
# rank and world size from the group
sampler = DistributedSampler(dataset, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
# --8<-- [end:data]


def make_model() -> nn.Module:
    # the same start in every process (DDP would broadcast rank 0's anyway)
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


# --8<-- [start:model]
model = make_model().to(device)
ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
# --8<-- [end:model]

# --8<-- [start:loop]
for epoch in range(EPOCHS):
    sampler.set_epoch(epoch)  # a different shuffle each epoch (see the next page)
    total = torch.zeros(2, device=device)  # loss sum, sample count
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # gradients are averaged over all processes here
        opt.step()
        total += torch.stack(
            [loss.detach() * len(x), torch.tensor(len(x), device=device)]
        )
    dist.all_reduce(total)
    if rank == 0:
        print(f"epoch {epoch}: mean loss {total[0].item() / total[1].item():.4f} "
              f"over {int(total[1].item())} samples")
# --8<-- [end:loop]

# --8<-- [start:check]
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
copies = [torch.empty_like(flat) for _ in range(world_size)]
dist.all_gather(copies, flat)  # every rank's parameters, on every rank
replicas_diff = max((c - flat).abs().max().item() for c in copies)

# One process, full batches: each step takes the union of what every rank saw in that
# step.
ref = make_model().to(device)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
samplers = [
    DistributedSampler(dataset, world_size, r, shuffle=True, seed=0)
    for r in range(world_size)
]
for epoch in range(EPOCHS):
    for s in samplers:
        s.set_epoch(epoch)
    per_rank = [list(s) for s in samplers]
    for i in range(0, len(per_rank[0]), BATCH):
        idx = [j for order in per_rank for j in order[i:i + BATCH]]
        ref_opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ref(X[idx].to(device)), Y[idx].to(device)).backward()
        ref_opt.step()
ref_flat = torch.cat([p.detach().flatten() for p in ref.parameters()])
full_batch_diff = (ref_flat - flat).abs().max().item()
if rank == 0:  # each verdict says what its figure shows
    same = "== 0: bit-identical" if replicas_diff == 0 else "!= 0: the replicas differ"
    print(f"max |difference| between the {world_size} replicas: {replicas_diff:.1e} "
          f"({same})")
    close = ("< 1e-5: equal up to float32 round-off" if full_batch_diff < 1e-5
             else ">= 1e-5: NOT equal, more than round-off")
    print(f"max |DDP - one process on the full batch|: {full_batch_diff:.1e}\n"
          f"  ({close})")
assert replicas_diff == 0.0, "the replicas diverged"
assert full_batch_diff < 1e-5, "DDP did not match full-batch training"
# --8<-- [end:check]

# --8<-- [start:cleanup]
# release DDP's hold on the process group first (see "Shutting down cleanly")
del ddp, opt
gc.collect()
dist.destroy_process_group()
# --8<-- [end:cleanup]
