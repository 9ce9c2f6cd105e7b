"""Evaluation under FSDP2: a rank with one batch more waits for the others in forward.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp_eval.py [--fix]
"""

import argparse
import os
import re
import sys
import textwrap
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="the same forwards on every rank")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_eval.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if world == 1:
    sys.exit("one process cannot wait for another: run with --nproc-per-node=2 or more")
# --8<-- [start:init]
# gloo and the CPU on any machine; rank 0 waits 3 s and the others 6 s, so rank 0 gives
# up first unless it reaches the hang more than 3 s after them (a busy machine)
timeout = timedelta(seconds=3 if rank == 0 else 6)
# but first every rank waits up to 60 s for all to start: a late start is not the hang
store, rank, world = next(dist.rendezvous("env://", timeout=timedelta(seconds=60)))
store.set(f"started/{rank}", "1")
store.wait([f"started/{r}" for r in range(world)])
dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                        timeout=timeout)
mesh = init_device_mesh("cpu", (world,))
# --8<-- [end:init]
if rank == 0:
    print(f"{world} processes: gloo on cpu (this demo, on any machine)")

torch.manual_seed(0)  # the same model on every rank, then sharded
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
for layer in (model[0], model[2]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
model.eval()

# --8<-- [start:data]
# each rank's share of the evaluation set: rank 0 has one batch more (a split that
# does not divide evenly, an iterable dataset, drop_last=False on a custom sampler...)
gen = torch.Generator().manual_seed(rank)
batches = [(torch.randn(4, 8, generator=gen), torch.randint(0, 4, (4,), generator=gen))
           for _ in range(3 if rank == 0 else 2)]
# --8<-- [end:data]


# --8<-- [start:bug]
def evaluate(batches):
    right = torch.zeros(2)  # correct, seen
    with torch.no_grad():
        for x, y in batches:
            # FSDP all-gathers each layer's weights in forward: a collective
            right += torch.tensor([(model(x).argmax(1) == y).sum(), len(y)])
    dist.all_reduce(right)  # rank 0 is still in its 3rd forward
    return right
# --8<-- [end:bug]


# --8<-- [start:fix]
# any input the model accepts: for a rank whose batches ran out, or that had none
DUMMY = torch.zeros(1, 8), torch.zeros(1, dtype=torch.long)


def evaluate_padded(batches):
    steps = torch.tensor([len(batches)])
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)  # the longest rank's count
    right = torch.zeros(2)
    with torch.no_grad():
        for i in range(int(steps)):
            x, y = batches[i] if i < len(batches) else DUMMY
            hits = (model(x).argmax(1) == y).sum()  # every rank runs every forward
            if i < len(batches):  # the dummy batch only joins the collectives
                right += torch.tensor([hits, len(y)])
    dist.all_reduce(right)
    return right
# --8<-- [end:fix]


if not args.fix:
    start = time.monotonic()
    try:
        evaluate(batches)
    except RuntimeError as e:
        if rank == 0:
            first = re.sub(r"^\[[^\]]*\.cc:\d+\] ", "", str(e).splitlines()[0])
            print(f"rank 0: RuntimeError after {time.monotonic() - start:.1f} s:")
            print(textwrap.fill(first, 80, initial_indent="  ", subsequent_indent="  "))
    dist.destroy_process_group()
    sys.exit(0)

right = evaluate_padded(batches)
only_rank_0 = evaluate_padded(batches if rank == 0 else [])  # the others: no batch
# --8<-- [start:full]
# or: gather the full weights (a collective: every rank calls it), evaluate anywhere
full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                            cpu_offload=True))
# --8<-- [end:full]
everyone = [None] * world
dist.all_gather_object(everyone, batches)
if rank == 0:
    print(f"padded, every rank the same forwards: {int(right[0])} of {int(right[1])}")
    print(f"padded, only rank 0 has batches:     "
          f"{int(only_rank_0[0])} of {int(only_rank_0[1])}")
    plain = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    plain.load_state_dict(full)  # a plain model: no collective in its forward
    with torch.no_grad():
        hits = sum(int((plain(x).argmax(1) == y).sum()) for b in everyone for x, y in b)
    seen = sum(len(y) for b in everyone for _, y in b)
    print(f"full state dict, rank 0 alone:       {hits} of {seen}")
# the ranks leave together: rank 0 tearing down its process group after rank 1 had
# exited aborted it ("terminate called without an active exception") in 2 of ~100 runs
dist.barrier()
dist.destroy_process_group()
