"""CPU affinity and threads of each torchrun worker, as started and after binding.

Each process binds itself to its own share of the CPUs it was started with, as
torchrun --numa-binding=exclusive, numactl or Slurm's --cpu-bind do before it starts.

Run with: torchrun --standalone --nproc-per-node=2 snippets/production/affinity.py
"""

import argparse
import os
import sys
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: torchrun --standalone "
             "--nproc-per-node=2 snippets/production/affinity.py")

# --8<-- [start:started]
local_rank = int(os.environ["LOCAL_RANK"])  # which share of this node's CPUs is ours
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # how many processes share them
started = sorted(os.sched_getaffinity(0))  # the CPUs this process may run on
threads_at_start = torch.get_num_threads()  # OpenMP's pool: OMP_NUM_THREADS, if set
if len(started) < local_world:
    sys.exit(f"{local_world} processes cannot each have CPUs of their own: this one "
             f"may run on {len(started)}" if local_rank == 0 else 2)
# --8<-- [end:started]

# --8<-- [start:bind]
# An equal share each, in order, the first ones one CPU more where it does not divide
# (torch's "exclusive" mode does the same with physical cores)
size, extra = divmod(len(started), local_world)
first = local_rank * size + min(local_rank, extra)
mine = started[first:first + size + (local_rank < extra)]
for task in os.listdir("/proc/self/task"):  # every thread of this process, not only
    os.sched_setaffinity(int(task), mine)   # the calling one (pid 0 = this thread)
torch.set_num_threads(len(mine))  # one OpenMP thread per CPU we may run on
seen = {}
probe = threading.Thread(target=lambda: seen.update(cpus=os.sched_getaffinity(0)))
probe.start()
probe.join()  # a thread started now inherits the binding
# --8<-- [end:bind]

# --8<-- [start:gather]
dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # after binding: its
rank, world = dist.get_rank(), dist.get_world_size()             # threads inherit it
mine_now = sorted(os.sched_getaffinity(0))
report = (local_rank, started, threads_at_start, os.environ.get("OMP_NUM_THREADS"),
          mine_now, torch.get_num_threads(), sorted(seen["cpus"]), os.uname().nodename)
everyone = [None] * world
dist.all_gather_object(everyone, report)
# --8<-- [end:gather]

# --8<-- [start:show]
failed = []
if rank == 0:
    nodes = sorted({r[7] for r in everyone})  # the processes of a node share its CPUs
    for n, node in enumerate(nodes):
        here = sorted((r for r in everyone if r[7] == node), key=lambda r: r[0])
        same = all(r[1] == here[0][1] for r in here)
        print(f"node {n}: {len(here)} processes, OMP_NUM_THREADS={here[0][3]}")
        print(f"as started, all may run on the same CPUs: {'yes' if same else 'no'}")
        for lr, _, threads, *_ in here:
            print(f"  local rank {lr}: torch threads {threads}")
        print("after binding, each on a share of its own:")
        for lr, _, _, _, now, threads, in_thread, _ in here:
            print(f"  local rank {lr}: torch threads = its CPUs: "
                  f"{'yes' if threads == len(now) else 'no'}; a new thread "
                  f"inherits them: {'yes' if in_thread == now else 'no'}")
        claimed = [cpu for r in here for cpu in r[4]]
        shared = len(claimed) - len(set(claimed))
        unused = len(set(here[0][1]) - set(claimed))
        print(f"CPUs claimed by more than one process: predicted 0 CPUs, "
              f"counted {shared:,} CPUs")
        print(f"CPUs started with, left unused: predicted 0 CPUs, "
              f"counted {unused:,} CPUs")
        failed += (["shared"] if shared else []) + (["unused"] if unused else [])
        if not all(r[5] == len(r[4]) and r[6] == r[4] for r in here):
            failed.append("threads")
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
# --8<-- [end:show]
