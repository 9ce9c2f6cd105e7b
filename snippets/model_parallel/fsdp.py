"""Fully sharded data parallel with FSDP2 (fully_shard): sharded parameters, training
equal to
one process, mixed precision, full and distributed checkpoints, CPU offload.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp.py
"""

import argparse
import copy
import gc
import os
import sys
import shutil
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/model_parallel/fsdp.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
# the batch of 16 is shared out equally, so that the mean over ranks is exact
if 16 % world:
    sys.exit(
        f"run with 1, 2, 4, 8 or 16 processes (they share a batch of 16), not {world}"
        if rank == 0
        else 2
    )
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")


def show(*args):
    if rank == 0:
        print(*args)


def max_diff(a, b):
    d = torch.tensor(
        max((x - y).abs().max().item() for x, y in zip(a, b)), device=device
    )
    dist.all_reduce(d, op=dist.ReduceOp.MAX)
    return d.item()


# --8<-- [start:shard]
# without mesh=, fully_shard shards over the GPUs if there are any: name the device
mesh = init_device_mesh(device.type, (world,))


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, 4)).to(device)


# the same full model on every process, trained below on the whole batch
ref = make_model()
model = make_model()
# each Linear is one unit: gathered just before it runs, freed after
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)  # the root: what is left, and the hooks driving the rest

w = model[0].weight
show(f"model[0].weight: {type(w).__name__} {w.placements},\n"
     f"  global {tuple(w.shape)}, local on each rank {tuple(w.to_local().shape)}")
local = sum(p.to_local().numel() for p in model.parameters())
counts = [None] * world
dist.all_gather_object(counts, local)
show(f"parameters held: {counts} of {sum(p.numel() for p in ref.parameters())}")
# --8<-- [end:shard]

# --8<-- [start:train]
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2)
for step in range(3):
    # same on all
    x, y = torch.randn(16, 32, device=device), torch.randn(16, 4, device=device)
    # this rank's part of the batch
    mine = slice(rank * 16 // world, (rank + 1) * 16 // world)
    # grads reduce-scattered (mean)
    nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
    opt.step()
    opt.zero_grad()
    nn.functional.mse_loss(ref(x), y).backward()  # one process, whole batch
    opt_ref.step()
    opt_ref.zero_grad()
diff = max_diff([p.full_tensor() for p in model.parameters()], ref.parameters())
verdict = ("< 1e-5: equal up to float32 round-off" if diff < 1e-5
           else ">= 1e-5: NOT equal, more than round-off")  # what the figure shows
show(f"after 3 Adam steps, max abs diff from one process: {diff:.1e}\n  ({verdict})")
assert diff < 1e-5, "FSDP trained differently from one process"
# --8<-- [end:train]

# --8<-- [start:full-state-dict]
full = get_model_state_dict(
    model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
)
sizes = [None] * world
dist.all_gather_object(sizes, len(full))
show(f"full state dict: {sizes} tensors per rank (rank 0 gets all of them, on the CPU)")
# plain tensors: torch.save(full, ...) writes a file that loads without FSDP
if rank == 0:
    show(
        "rank 0's full state dict holds:",
        {f"{type(t).__name__} on {t.device}" for t in full.values()},
    )
# --8<-- [end:full-state-dict]

# --8<-- [start:dcp]
path = [tempfile.mkdtemp() if rank == 0 else None]
# one directory, chosen by rank 0 (a shared disk across nodes)
dist.broadcast_object_list(path)
dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=path[0])
show("distributed checkpoint files:", sorted(os.listdir(path[0])))

fresh = make_model()  # new weights, then sharded the same way, then loaded
for layer in fresh:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(fresh, mesh=mesh)
state = {"model": get_model_state_dict(fresh)}
dcp.load(state, checkpoint_id=path[0])  # each rank reads only its own shards
set_model_state_dict(fresh, state["model"])
diff = max_diff(
    [p.to_local() for p in fresh.parameters()],
    [p.to_local() for p in model.parameters()],
)
verdict = "== 0: bit-identical" if diff == 0 else "!= 0: NOT what was saved"
show(f"loaded back, max abs diff: {diff:.1e} ({verdict})")
assert diff == 0, "the checkpoint did not load back what was saved"
dist.barrier()
if rank == 0:
    shutil.rmtree(path[0])
# --8<-- [end:dcp]

# --8<-- [start:mixed]
half = make_model()
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in half:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
fully_shard(half, mesh=mesh, mp_policy=policy)
x = torch.randn(16, 32, device=device)
out = half(x)
show(
    f"bf16 compute: output {out.dtype}, sharded parameters stay {half[0].weight.dtype}"
)
fp32 = make_model()(x)
diff = max_diff([out.float()], [fp32]) / fp32.abs().max().item()  # relative to fp32
verdict = ("< 2e-2: bf16 keeps 8 significant bits, about 2.4 decimal digits"
           if diff < 2e-2 else ">= 2e-2: more than bf16's rounding")
show(f"max |bf16 - fp32| / max |fp32|: {diff:.1e}\n  ({verdict})")
assert diff < 2e-2, "the bf16 output is further from fp32 than bf16's rounding"
# --8<-- [end:mixed]

# --8<-- [start:offload]
try:
    off = make_model()
    # shards live in (pinned) host memory
    fully_shard(off, mesh=mesh, offload_policy=CPUOffloadPolicy())
    off(torch.randn(16, 32, device=device)).sum().backward()
    show(
        f"CPU offload: parameters on {off[0].weight.device}, gradients on "
        f"{off[0].weight.grad.device}"
    )
except RuntimeError as e:
    show(f"CPU offload: RuntimeError:\n  {e}")
    show("CPU offload needs an accelerator to compute on: not run here")
# --8<-- [end:offload]

del model, fresh, half, ref
gc.collect()
dist.destroy_process_group()
