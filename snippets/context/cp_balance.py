"""Packed documents under context parallelism: the causal pairs within documents that
each rank computes, with the positions sharded by torch's own _context_parallel_shard
and each of its head-tail load balancers, against each rank taking chunks r and
2n-1-r of every document.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/context/cp_balance.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

# private, torch 2.13: the sharding and the balancers behind context_parallel()
from torch.distributed.tensor.experimental._attention import (
    _context_parallel_shard, _HeadTailLoadBalancer, _PerDocumentHeadTailLoadBalancer)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/context/cp_balance.py")
DOCS = [8, 8, 8, 24]  # lengths of the documents packed into one sequence
S = sum(DOCS)
world = int(os.environ["WORLD_SIZE"])
if world not in (2, 4):
    sys.exit(f"run with 2 or 4 processes (2n chunks of every document, {DOCS}), "
             f"not {world}" if os.environ["RANK"] == "0" else 2)
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))


def show(*text):
    if rank == 0:
        print(*text)


def spans(positions):  # [0, 1, 2, 10, 11] -> "0-2, 10-11"
    runs, start = [], positions[0]
    for a, b in zip(positions, positions[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}-{a}")
            start = b
    return ", ".join(runs)


# --8<-- [start:count]
starts = torch.tensor(DOCS).cumsum(0) - torch.tensor(DOCS)  # where each document starts
doc_start = torch.repeat_interleave(starts, torch.tensor(DOCS))  # per position
keys_seen = torch.arange(S) - doc_start + 1  # query p attends to keys in its document


def pairs_per_rank(mine):  # this rank's positions -> every rank's (query, key) pairs
    work = [torch.zeros((), dtype=torch.int64) for _ in range(world)]
    dist.all_gather(work, keys_seen[mine].sum())
    return [int(w) for w in work]


balancers = {"no balancer": None,
             "_HeadTailLoadBalancer": _HeadTailLoadBalancer(S, world, "cpu"),
             "_PerDocumentHeadTailLoadBalancer":
                 _PerDocumentHeadTailLoadBalancer([DOCS], world, "cpu")}
show(f"{world} processes, documents of {DOCS} positions packed into {S}")
for name, balancer in balancers.items():
    (mine,) = _context_parallel_shard(mesh, [torch.arange(S)[None]], [1],
                                      load_balancer=balancer)  # as CP shards inputs
    work = pairs_per_rank(mine[0])
    show(f"{name}: rank 0 holds {spans(sorted(mine[0].tolist()))}\n"
         f"  pairs per rank {work}, busiest / mean {max(work) * world / sum(work):.2f}")
# --8<-- [end:count]

# --8<-- [start:balanced]
own = [c for d in torch.arange(S).split(DOCS)  # chunks r and 2n-1-r of each document
       for i, c in enumerate(d.chunk(2 * world)) if i in (rank, 2 * world - 1 - rank)]
work = pairs_per_rank(torch.cat(own))
total = sum(d * (d + 1) // 2 for d in DOCS)  # causal pairs within the documents
show(f"chunks r and 2n-1-r of every document: pairs per rank {work}")
cost = ("causal pairs on the busiest rank", total // world, max(work))
show(f"{cost[0]}: predicted {cost[1]:,} pairs, counted {cost[2]:,} pairs")
dist.destroy_process_group()
if cost[1] != cost[2]:
    sys.exit(f"predicted != counted: {cost[0]}")
# --8<-- [end:balanced]
