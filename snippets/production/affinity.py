"""CPU affinity and threads of each torchrun worker, as started and after binding.

Each process binds itself to its own share of the physical cores it was started with,
as numactl or Slurm's --cpu-bind do before it starts (a sketch: torchrun
--numa-binding=exclusive also keeps each share on its GPU's NUMA node).

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


def core(cpu):  # the hardware threads of one physical core: the same (socket, core)
    top = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
    try:
        return tuple(int(open(top + f).read()) for f in ("physical_package_id",
                                                         "core_id"))
    except OSError:  # no topology here (some sandboxes): each CPU a core of its own
        return (0, cpu)


cores = sorted({core(cpu) for cpu in started})  # socket by socket, core by core
if len(cores) < local_world:
    sys.exit(f"{local_world} processes cannot each have cores of their own: this one "
             f"may run on {len(cores)}" if local_rank == 0 else 2)
# --8<-- [end:started]

# --8<-- [start:bind]
# An equal share of whole cores each, the first ones one core more where it does not
# divide: a core's hardware threads (CPUs n and n + N/2 on most x86) stay together
size, extra = divmod(len(cores), local_world)
first = local_rank * size + min(local_rank, extra)
my_cores = cores[first:first + size + (local_rank < extra)]
mine = [cpu for cpu in started if core(cpu) in my_cores]
for task in os.listdir("/proc/self/task"):  # every thread of this process, not only
    os.sched_setaffinity(int(task), mine)   # the calling one (pid 0 = this thread)
torch.set_num_threads(len(my_cores))  # one compute thread per core; the second
# hardware thread of each core, if any, is left to DataLoader workers and the rest
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
          mine_now, torch.get_num_threads(), sorted(seen["cpus"]), os.uname().nodename,
          sorted({core(cpu) for cpu in mine_now}))  # the cores it may now run on
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
        for lr, _, _, _, now, threads, in_thread, _, own in here:
            print(f"  local rank {lr}: torch threads = its cores: "
                  f"{'yes' if threads == len(own) else 'no'};\n    a new thread "
                  f"inherits its CPUs: {'yes' if in_thread == now else 'no'}")
        claimed = [cpu for r in here for cpu in r[4]]
        shared = len(claimed) - len(set(claimed))
        unused = len(set(here[0][1]) - set(claimed))
        split = [tuple(c) for r in here for c in r[8]]  # each core in one share only
        split = len(split) - len(set(split))
        print(f"CPUs claimed by more than one process: predicted 0 CPUs, "
              f"counted {shared:,} CPUs")
        print(f"physical cores in more than one share: predicted 0 cores, "
              f"counted {split:,} cores")
        print(f"CPUs started with, left unused: predicted 0 CPUs, "
              f"counted {unused:,} CPUs")
        failed += ((["shared"] if shared else []) + (["unused"] if unused else [])
                   + (["cores"] if split else []))
        if not all(r[5] == len(r[8]) and r[6] == r[4] for r in here):
            failed.append("threads")
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
# --8<-- [end:show]
