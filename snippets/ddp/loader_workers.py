"""DataLoader workers under DDP: every rank starts its own, so processes multiply.

Run with: OMP_NUM_THREADS=2 torchrun --standalone --nproc-per-node=2 \
              snippets/ddp/loader_workers.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler


# --8<-- [start:dataset]
class WhoLoads(Dataset):
    """Each sample says which process made it, and how many threads torch uses there."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return os.getpid(), torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


def as_list(batch):
    """The collate_fn: keep the tuples as they are. A function of the module, not a
    lambda: forkserver and spawn send it to every worker by pickling it."""
    return batch
# --8<-- [end:dataset]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start-method", choices=["fork", "forkserver", "spawn"],
                        help="how the workers start (default: Python's for this "
                             "platform, fork on Linux before Python 3.14)")
    args = parser.parse_args()
    if "LOCAL_RANK" not in os.environ:
        sys.exit("start me with torchrun, e.g.: torchrun --standalone "
                 "--nproc-per-node=2 snippets/ddp/loader_workers.py")
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # no tensors sent
    rank, world_size = dist.get_rank(), dist.get_world_size()

    # --8<-- [start:count]
    dataset = WhoLoads()
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=as_list,
                        sampler=DistributedSampler(dataset, shuffle=False),
                        multiprocessing_context=args.start_method)  # None: the default
    workers = {pid: (threads, omp) for batch in loader for pid, threads, omp in batch}
    mine = (os.getpid(), torch.get_num_threads(), sorted(workers.items()))
    everyone = [None] * world_size
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        if args.start_method:
            print(f"workers started by {args.start_method}")
        for r, (pid, threads, ws) in enumerate(everyone):
            print(f"rank {r}: pid {pid}, torch threads {threads}")
            for wpid, (wthreads, omp) in ws:
                print(f"  loader worker pid {wpid}: torch threads {wthreads}, "
                      f"OMP_NUM_THREADS={omp}")
        total = sum(1 + len(ws) for _, _, ws in everyone)
        print(f"{world_size} ranks x (1 + {loader.num_workers} workers) = {total} "
              "processes")
    # --8<-- [end:count]

    del loader  # its worker processes end with it
    dist.destroy_process_group()


if __name__ == "__main__":  # forkserver and spawn import this file again in each worker
    main()
