"""FSDP2 checkpoints with the optimizer's state (torch.distributed.checkpoint): saved by
N processes, loaded by M, and training goes on as if it had never stopped.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp_dcp.py --save /tmp/fsdp-checkpoint
     OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=3 \
         snippets/model_parallel/fsdp_dcp.py --load /tmp/fsdp-checkpoint
"""

import argparse
import gc
import json
import os
import shutil
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
what = parser.add_mutually_exclusive_group(required=True)
what.add_argument("--save", metavar="DIR", help="train 2 steps, save, train one more")
what.add_argument("--load", metavar="DIR", help="load what --save wrote, train a step")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_dcp.py --save DIR")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
BATCH, WIDTH = 12, 24
if BATCH % world:
    sys.exit(f"run with 1, 2, 3, 4, 6 or 12 processes (they share a batch of {BATCH}), "
             f"not {world}" if rank == 0 else 2)
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


def show(*a):
    if rank == 0:
        print(*a)


show(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")


# without mesh=, fully_shard shards over the GPUs if there are any: name the device
mesh = init_device_mesh(device.type, (world,))


def sharded_model(meta: bool) -> nn.Module:
    torch.manual_seed(0)
    with torch.device("meta" if meta else device):
        model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 1))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    if meta:  # shards allocated, not initialised: the checkpoint fills them
        model.to_empty(device=device)
    return model


def batch(step: int):
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, 1, generator=g)
    mine = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    return x[mine].to(device), y[mine].to(device)


def train_step(model, opt, step: int) -> None:
    x, y = batch(step)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()


def loss_on(model, step: int) -> float:
    """The loss on step `step`'s whole batch: the mean of the processes' equal parts."""
    x, y = batch(step)
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(x), y)
    dist.all_reduce(loss)  # a sum (gloo has no average)
    return loss.item() / world


# --8<-- [start:save]
if args.save:
    if rank == 0:
        shutil.rmtree(args.save, ignore_errors=True)
    model = sharded_model(meta=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(2):
        train_step(model, opt, step)
    # sharded state dicts: each process saves only its own shards of both
    model_state, optim_state = get_state_dict(model, opt)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=args.save)
    show(f"saved by {world} processes:", sorted(os.listdir(args.save)))
    train_step(model, opt, 2)  # what the run did next
    # --8<-- [end:save]
    after = loss_on(model, 3)
    show(f"step 2 trained on, then loss on batch 3: {after:.6f}")
    if rank == 0:
        with open(os.path.join(args.save, "next_loss.json"), "w") as f:
            json.dump(after, f)

# --8<-- [start:load]
if args.load:
    model = sharded_model(meta=True)  # any number of processes, sharded its own way
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model_state, optim_state = get_state_dict(model, opt)  # shapes to fill
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=args.load)  # each process reads the pieces it needs
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    train_step(model, opt, 2)  # go on where the saved run stopped
    # --8<-- [end:load]
    after = loss_on(model, 3)
    with open(os.path.join(args.load, "next_loss.json")) as f:
        expected = json.load(f)
    show(f"loaded by {world} processes, step 2 trained, loss on batch 3: {after:.6f}\n"
         f"  (the saving run: {expected:.6f})")
    assert abs(after - expected) < 1e-6, (after, expected)

    # the same without the optimizer's state: Adam starts again from zero moments
    bare = sharded_model(meta=True)
    bare_state = {"model": get_model_state_dict(bare)}
    dcp.load(bare_state, checkpoint_id=args.load)
    set_model_state_dict(bare, bare_state["model"])
    bare_opt = torch.optim.AdamW(bare.parameters(), lr=1e-2)
    train_step(bare, bare_opt, 2)
    show(f"weights only, fresh AdamW: loss on batch 3: {loss_on(bare, 3):.6f}")
    del bare, bare_opt

del model, opt
gc.collect()
dist.destroy_process_group()
