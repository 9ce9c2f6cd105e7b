"""clip_grad_norm_ with FSDP2, tensor parallel and pipeline stages: which norm you get,
and the clipped gradients compared with one process on the whole model.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp_clip.py
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/model_parallel/fsdp_clip.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 16 % world:  # a batch of 16 shared out equally; 16 and 32 features cut equally
    sys.exit(f"run with 1, 2, 4, 8 or 16 processes, not {world}" if rank == 0 else 2)
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
mesh = init_device_mesh(device.type, (world,))
MAX_NORM = 0.1  # below the norm here: the gradients are scaled down


def show(*args):
    if rank == 0:
        print(*args)


def every_rank(value: float) -> list[float]:
    values = [None] * world
    dist.all_gather_object(values, round(value, 4))
    return values


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to(device)


def full(t):  # a sharded gradient as one tensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def rel_diff(grads, refs) -> float:
    # relative to each reference gradient (clipped, they are small): the worst of them,
    # over every rank
    d = max(((full(g) - r).abs().max() / r.abs().max()).item()
            for g, r in zip(grads, refs))
    worst = [None] * world
    dist.all_gather_object(worst, d)
    return max(worst)


def verdict(d: float) -> str:  # what the figure shows, computed from it
    if d < 1e-5:
        return f"max rel diff {d:.1e}\n    (< 1e-5: equal up to float32 round-off)"
    return f"max rel diff {d:.1e}\n    (>= 1e-5: NOT equal, more than round-off)"


torch.manual_seed(1)
x, y = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
mine = slice(rank * 16 // world, (rank + 1) * 16 // world)  # this rank's part

# one process, the whole model and the whole batch
ref = make_model()
nn.functional.mse_loss(ref(x), y).backward()
ref_norm = nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM)
show(f"one process, whole model: total norm {ref_norm.item():.4f}")

# --8<-- [start:fsdp]
model = make_model()
for layer in model[0], model[2]:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
nn.functional.mse_loss(model(x[mine]), y[mine]).backward()

norm = nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
show(f"FSDP2: clip_grad_norm_ returned a {type(norm).__name__} {norm.placements}")
total = norm.full_tensor().item()  # the global norm, whatever the placement
show(f"  norm.full_tensor() on every rank: {every_rank(total)}")
d = rel_diff([p.grad for p in model.parameters()], [q.grad for q in ref.parameters()])
show(f"  clipped gradients vs one process: {verdict(d)}")
# --8<-- [end:fsdp]
assert d < 1e-5, "FSDP2's clipped gradients differ from one process's"
assert abs(total - ref_norm.item()) < 1e-5

# --8<-- [start:per-parameter]
g = model[0].weight.grad
part = torch.linalg.vector_norm(g)  # one parameter's norm: a partial result
show(f"  norm of model[0].weight.grad: {type(part).__name__} {part.placements}")
show(f"    to_local() on every rank: {every_rank(part.to_local().item())} (its shard)")
show(f"    full_tensor():            {every_rank(part.full_tensor().item())}")
# --8<-- [end:per-parameter]

# --8<-- [start:tp]
tp = make_model()
parallelize_module(tp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
nn.functional.mse_loss(tp(x), y).backward()  # tensor parallel: the same batch on all
norm = nn.utils.clip_grad_norm_(tp.parameters(), MAX_NORM)
show(f"TP: clip_grad_norm_ returned a {type(norm).__name__} {norm.placements},\n"
     f"  full_tensor() {every_rank(norm.full_tensor().item())}")
d = rel_diff([p.grad for p in tp.parameters()], [q.grad for q in ref.parameters()])
show(f"  clipped gradients vs one process: {verdict(d)}")
# --8<-- [end:tp]
assert d < 1e-5, "TP's clipped gradients differ from one process's"

# --8<-- [start:stages]
# pipeline stages (simulated): each rank keeps the gradients of its own layers only,
# as plain tensors; clip_grad_norm_ sees this rank's parameters, not the model's
stage = make_model()
nn.functional.mse_loss(stage(x), y).backward()
mine_params = [p for i, p in enumerate(stage.parameters()) if i % world == rank]
local = nn.utils.get_total_norm([p.grad for p in mine_params])
show(f"stages: this rank's norm on every rank: {every_rank(local.item())}")
squares = local**2
dist.all_reduce(squares)  # the sum of squares over the stages
total = squares.sqrt()
show(f"  all-reduced: {every_rank(total.item())}")
nn.utils.clip_grads_with_norm_(mine_params, MAX_NORM, total)
# --8<-- [end:stages]
refs = [q for i, q in enumerate(ref.parameters()) if i % world == rank]
d = rel_diff([p.grad for p in mine_params], [q.grad for q in refs])
show(f"  clipped gradients of each stage vs one process: {verdict(d)}")
assert d < 1e-5, "the stages' clipped gradients differ from one process's"
assert abs(total.item() - ref_norm.item()) < 1e-5

del model, tp
gc.collect()
dist.destroy_process_group()
