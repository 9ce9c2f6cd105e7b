"""Activation checkpointing under DDP: a reentrant checkpoint marks a parameter ready
twice.

Run with: torchrun --standalone --nproc-per-node=2 \
              snippets/troubleshooting/checkpoint_ddp.py
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: torchrun --standalone --nproc-per-node=2 "
             "snippets/troubleshooting/checkpoint_ddp.py")
# gloo on the CPU on any machine: the error comes from DDP's bookkeeping, not the device
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
if rank == 0:
    print(f"{dist.get_world_size()} processes: gloo on cpu (this demo, on any machine)")


# --8<-- [start:model]
class Net(nn.Module):
    def __init__(self, use_reentrant):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.Tanh())  # used twice below
        self.out = nn.Linear(8, 1)
        self.aux = nn.Linear(8, 1)  # unused: why find_unused_parameters=True is set
        self.use_reentrant = use_reentrant

    def forward(self, x):
        h = self.inp(x)
        for _ in range(2):  # recompute the block's activations in backward
            h = checkpoint(self.block, h, use_reentrant=self.use_reentrant)
        return self.out(h)
# --8<-- [end:model]


def train(model, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)  # each rank its own data, same every run
    x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 1, generator=gen)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return f"loss {losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps"


def attempt(label, use_reentrant, **ddp_args):
    torch.manual_seed(0)
    model = DDP(Net(use_reentrant), **ddp_args)
    try:
        result = train(model)
    except RuntimeError as e:
        lines = str(e).splitlines()  # first sentence of the first and the last line
        first, last = (line.split(". ")[0] + "." for line in (lines[0], lines[-1]))
        result = f"RuntimeError: {first}\n  {last}"
    if rank == 0:
        print(f"{label}:\n  {result}")
    del model
    gc.collect()


# --8<-- [start:error]
attempt("use_reentrant=True, find_unused_parameters=True", True,
        find_unused_parameters=True)
# --8<-- [end:error]
# --8<-- [start:fix]
attempt("use_reentrant=False, find_unused_parameters=True", False,
        find_unused_parameters=True)
attempt("use_reentrant=True, static_graph=True", True, static_graph=True)
# --8<-- [end:fix]

dist.destroy_process_group()
