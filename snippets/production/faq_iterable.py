"""An IterableDataset under torchrun: every rank and worker reads the whole stream.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/production/faq_iterable.py [--fix]
"""

import argparse
import collections
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="each (rank, worker) reads its own share of the stream")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/faq_iterable.py")
# data loading only: gloo on the CPU on any machine, to gather what each rank saw
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 0:
    print(f"{world} processes, 2 DataLoader workers each")


# --8<-- [start:bug]
class Stream(IterableDataset):  # records read in order: lines of files, a web stream
    def __init__(self, n):
        self.n = n

    def __iter__(self):  # every copy of the dataset starts at the first record
        return iter(range(self.n))
# --8<-- [end:bug]


# --8<-- [start:fix]
class ShardedStream(Stream):
    def __iter__(self):  # shard s of n: records s, s + n, s + 2n, ...
        info = get_worker_info()  # None in the main process (num_workers=0)
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        rank = dist.get_rank() if dist.is_initialized() else 0
        world = dist.get_world_size() if dist.is_initialized() else 1
        n, s = world * workers, rank * workers + worker
        return iter(range(s, self.n, n))
# --8<-- [end:fix]


dataset = (ShardedStream if args.fix else Stream)(24)
loader = DataLoader(dataset, batch_size=4, num_workers=2)
seen = [int(i) for batch in loader for i in batch]
everyone = [None] * world
dist.all_gather_object(everyone, seen)
if rank == 0:
    for r, s in enumerate(everyone):
        print(f"rank {r}: {len(s)} records, first batches {s[:8]}")
    total = collections.Counter(i for s in everyone for i in s)
    once = sorted(total) == list(range(24)) and set(total.values()) == {1}
    print(f"one epoch: {sum(total.values())} records read, {len(total)} distinct "
          f"(one process: 24); each once: {once}")
    if args.fix and not once:  # the fix must read every record exactly once
        sys.exit("with --fix: the ranks and workers did not share the stream")
dist.destroy_process_group()
