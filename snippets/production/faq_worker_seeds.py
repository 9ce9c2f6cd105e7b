"""Random augmentations under torchrun: every rank draws the same numbers.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/production/faq_worker_seeds.py [--fix]
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="a DataLoader generator seeded per rank")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/faq_worker_seeds.py")
# data loading only: gloo on the CPU on any machine, to gather what each rank drew
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 0:
    print(f"{world} processes, 2 DataLoader workers each")


class Scaled(Dataset):  # sample i and the random scale its augmentation drew
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return i, torch.empty(()).uniform_(0.5, 1.5)  # a worker's own torch generator


# --8<-- [start:bug]
torch.manual_seed(0)  # every rank: the same initial weights (and dropout, ...)
dataset = Scaled()
sampler = DistributedSampler(dataset, shuffle=True, seed=0)
generator = None  # the workers' seeds are drawn from the global generator
# --8<-- [end:bug]
if args.fix:
    # --8<-- [start:fix]
    generator = torch.Generator().manual_seed(1234 + rank)  # a stream per rank
    # --8<-- [end:fix]
loader = DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=2,
                    generator=generator)
drawn = [(int(i), float(s)) for index, scale in loader for i, s in zip(index, scale)]
everyone = [None] * world
dist.all_gather_object(everyone, drawn)
if rank == 0:
    for r, d in enumerate(everyone):
        print(f"rank {r}: samples {[i for i, _ in d[:5]]}, "
              f"scales {[round(s, 2) for _, s in d[:5]]}")
    pairs = list(zip(*[[s for _, s in d] for d in everyone]))
    equal = sum(len(set(p)) == 1 for p in pairs)
    print(f"scales the same on every rank: {equal} of {len(pairs)} positions")
else:
    equal = None
equal = [equal]
dist.broadcast_object_list(equal)
dist.destroy_process_group()
if args.fix and equal[0] > 0:  # independent float streams: no equal draw
    sys.exit("with --fix: the ranks still draw the same augmentations")
