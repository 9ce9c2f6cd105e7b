"""Resuming in the middle of an epoch: the batches left are those of which shuffle?

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/production/faq_resume_order.py [--fix]
"""

import argparse
import collections
import os
import sys
from datetime import timedelta

import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="set_epoch(epoch) first, then skip the batches already done")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/faq_resume_order.py")
# data loading only: gloo on the CPU on any machine, to gather what each rank read
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
dataset, BATCH = list(range(20)), 2  # 20 samples; per rank and step
sampler = DistributedSampler(dataset, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
steps = len(loader)  # per epoch
if rank == 0:
    print(f"{world} processes, {steps} steps an epoch of {BATCH} samples per rank")

read = []  # the uninterrupted run: epochs 0 and 1
for epoch in range(2):
    sampler.set_epoch(epoch)
    read += [int(i) for batch in loader for i in batch]
epoch, done = 1, 2  # the job stopped after 2 steps of epoch 1; the checkpoint says so
resumed = read[:(steps + done) * BATCH]  # what it read before it stopped

# the new job builds a new sampler and loader
sampler = DistributedSampler(dataset, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
if not args.fix:
    # --8<-- [start:bug]
    for i, batch in enumerate(loader):  # the sampler's epoch is still 0
        if i < done:
            continue  # skip the batches trained on before the stop
        resumed += [int(i) for i in batch]
    # --8<-- [end:bug]
else:
    # --8<-- [start:fix]
    sampler.set_epoch(epoch)  # the shuffle of the epoch that was stopped
    rest = list(sampler)[done * BATCH:]  # skipped as indices: nothing loaded
    for batch in DataLoader(dataset, batch_size=BATCH, sampler=rest):
        resumed += [int(i) for i in batch]
    # --8<-- [end:fix]
everyone = [None] * world
dist.all_gather_object(everyone, (read, resumed))
same = all(a == b for a, b in everyone)
if rank == 0:
    for r, (a, b) in enumerate(everyone):
        print(f"rank {r}, epoch 1 uninterrupted: {a[steps * BATCH:]}")
        print(f"rank {r}, epoch 1 resumed:       {b[steps * BATCH:]}")
    seen = collections.Counter(i for _, b in everyone for i in b[steps * BATCH:])
    print(f"epoch 1: {len(seen)} of 20 samples read, "
          f"{sum(n > 1 for n in seen.values())} twice; same as uninterrupted: {same}")
dist.destroy_process_group()
if args.fix and not same:  # every rank: the fix must read what the run would have
    sys.exit("with --fix: the resumed epoch is not the uninterrupted one")
