"""clip_grad_norm_ and GradScaler when the gradients are not all DTensors on one mesh
(here a tensor-parallel plan that leaves a layer plain), and the total norm by hand.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp_clip_mixed.py
"""

import argparse
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_clip_mixed.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 32 % world:  # the first layer's 32 rows cut equally
    sys.exit(f"run with 1, 2, 4, 8, 16 or 32 processes, not {world}"
             if rank == 0 else 2)
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


def error(e: Exception) -> str:  # the message without its advice, wrapped at 80
    return f"{type(e).__name__}:\n" + textwrap.fill(
        str(e).split(", need")[0], 80, initial_indent="    ", subsequent_indent="    ",
        break_long_words=False, break_on_hyphens=False)


torch.manual_seed(1)
x, y = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
ref = make_model()  # one process, the whole model
nn.functional.mse_loss(ref(x), y).backward()
ref_norm = nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM)
show(f"one process, whole model: total norm {ref_norm.item():.4f}")

# --8<-- [start:mixed]
model = make_model()
# tensor parallel on the first layer only; the second stays a plain nn.Linear
parallelize_module(model, mesh, {"0": ColwiseParallel(output_layouts=Replicate())})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(device.type)
scaler.scale(nn.functional.mse_loss(model(x), y)).backward()  # the same batch on all
show("gradients:", [type(p.grad).__name__ for p in model.parameters()])
try:
    scaler.unscale_(opt)
    show("  GradScaler.unscale_: accepted the mixed list")
except RuntimeError as e:
    show(f"  GradScaler.unscale_: {error(e)}")
model.zero_grad()  # again, without the scaler
nn.functional.mse_loss(model(x), y).backward()
try:
    nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    show("  clip_grad_norm_: accepted the mixed list")
except RuntimeError as e:
    show(f"  clip_grad_norm_: {error(e)}")
# --8<-- [end:mixed]


# --8<-- [start:by-hand]
def grad_norm(parameters, norm_type=2.0):
    """The total norm of plain and DTensor gradients, on any meshes; and the groups."""
    groups = {}  # mesh -> its parameters; None -> the plain ones
    for p in parameters:
        if p.grad is not None:
            mesh = p.grad.device_mesh if isinstance(p.grad, DTensor) else None
            groups.setdefault(mesh, []).append(p)
    norms = []
    for group in groups.values():
        norm = nn.utils.get_total_norm([p.grad for p in group], norm_type)
        # a DTensor's norm over its mesh, as a plain tensor; a plain group's
        # gradients are replicated (the same on every rank), so its norm is local
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    # the norm of the groups' norms: sqrt of the sum of squares for norm_type=2
    total = torch.linalg.vector_norm(torch.stack(norms), norm_type)
    return total, list(groups.values())


total, groups = grad_norm(model.parameters())
for group in groups:  # one call per group: a mixed list fails here too
    nn.utils.clip_grads_with_norm_(group, MAX_NORM, total)
# --8<-- [end:by-hand]
show(f"by hand: total norm on every rank {every_rank(total.item())}")
# relative to each reference gradient (clipped, they are small): the worst of them
d = max((((p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad) - q.grad)
         .abs().max() / q.grad.abs().max()).item()
        for p, q in zip(model.parameters(), ref.parameters()))
verdict = ("< 1e-5: equal up to float32 round-off" if d < 1e-5
           else ">= 1e-5: NOT equal, more than round-off")  # what the figure shows
show(f"  clipped gradients vs one process: max rel diff {d:.1e}\n    ({verdict})")
assert d < 1e-5, "the clipped gradients differ from one process's"
assert abs(total.item() - ref_norm.item()) < 1e-5, (total, ref_norm)
dist.destroy_process_group()
