"""DistributedSampler shuffles with a seed plus the epoch: forget set_epoch and every
epoch repeats."""

import argparse
import os
from datetime import timedelta

import torch.distributed as dist
from torch.utils.data import DistributedSampler

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# no tensors: gloo everywhere
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank, world_size = dist.get_rank(), dist.get_world_size()
dataset = list(range(12))  # anything with a length will do


# --8<-- [start:orders]
def orders(call_set_epoch: bool, epochs: int = 3) -> list[list[int]]:
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    seen = []
    for epoch in range(epochs):
        if call_set_epoch:
            sampler.set_epoch(epoch)
        seen.append(list(sampler))  # the indices this rank gets in this epoch
    return seen


for flag in (False, True):
    mine = orders(flag)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        print(f"set_epoch called: {flag}")
        for epoch in range(len(mine)):
            print(
                f"  epoch {epoch}:",
                "  ".join(f"rank {r} {everyone[r][epoch]}" for r in range(world_size)),
            )
    # in every epoch the ranks share the data out exactly
    for epoch_shards in zip(*everyone):
        assert sorted(i for shard in epoch_shards for i in shard) == dataset
    same = all(e == mine[0] for e in mine)
    assert same == (not flag), "set_epoch should be what changes the order"
# --8<-- [end:orders]

dist.destroy_process_group()
