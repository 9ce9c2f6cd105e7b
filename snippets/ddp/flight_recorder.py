"""Flight Recorder: every rank's last collectives, dumped when one fails, compared.

Run with: TORCH_FR_BUFFER_SIZE=100 OMP_NUM_THREADS=1 torchrun --standalone \
              --nproc-per-node=2 snippets/ddp/flight_recorder.py
"""

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: TORCH_FR_BUFFER_SIZE=100 torchrun "
             "--standalone --nproc-per-node=2 snippets/ddp/flight_recorder.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if world < 2:
    sys.exit("run with 2 or more processes: the bug is one rank skipping a collective")
if int(os.environ.get("TORCH_FR_BUFFER_SIZE", "0")) <= 0:
    sys.exit("set TORCH_FR_BUFFER_SIZE=100 (entries kept per rank): it records nothing "
             "without it" if rank == 0 else 2)
# one folder per run, shared by the ranks of this machine
dumps = os.path.join(tempfile.gettempdir(), "fr-" + os.environ["TORCHELASTIC_RUN_ID"])
os.makedirs(dumps, exist_ok=True)
os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"  # the C++ log repeats the error

# every rank first waits up to 60 s for all to start (a late start is not the bug), so
# that the short timeout below only ever meets the bug
store, _, _ = next(dist.rendezvous("env://", timeout=timedelta(seconds=60)))
store.set(f"started/{rank}", "1")
store.wait([f"started/{r}" for r in range(world)])

# --8<-- [start:bug]
# gloo on the CPU on any machine; the recorder is the same for NCCL
dist.init_process_group("gloo", timeout=timedelta(seconds=3))
grads = torch.ones(1000)
batches = 3 + (rank == 0)  # the bug: rank 0 has one batch more (an uneven split)
try:
    for step in range(batches):
        dist.all_reduce(grads)  # rank 0's last one waits for ranks that are done
except RuntimeError as e:
    print(f"rank {rank}: {type(e).__name__} after the 3 s timeout", file=sys.stderr)
# each rank writes what it recorded (NCCL's watchdog does it for you on a timeout)
trace = torch._C._distributed_c10d._dump_fr_trace()  # pickled, for PyTorch's tools
with open(os.path.join(dumps, f"rank{rank}.tmp"), "wb") as f:
    f.write(trace)
os.replace(f.name, os.path.join(dumps, f"rank{rank}.pkl"))  # appears complete
# --8<-- [end:bug]

# --8<-- [start:compare]
files = [os.path.join(dumps, f"rank{r}.pkl") for r in range(world)]
deadline = time.monotonic() + 30
# every rank stays until all have dumped (or rank 0 has read and removed them)
while (os.path.isdir(dumps) and not all(map(os.path.exists, files))
       and time.monotonic() < deadline):
    time.sleep(0.1)
torch_dir = os.path.dirname(torch.__file__)
if rank == 0:
    if not all(map(os.path.exists, files)):
        sys.exit(f"not every rank wrote its dump to {dumps} within 30 s")
    entries = []
    for path in files:
        with open(path, "rb") as f:
            recorded = pickle.load(f)["entries"]
        entries.append({e["collective_seq_id"]: e for e in recorded})
    shutil.rmtree(dumps)
    print("collective | " + " | ".join(f"rank {r}" for r in range(world)))
    for seq in sorted(set().union(*entries)):
        calls = [e.get(seq) for e in entries]
        shown = [f"{c['profiling_name']} {c['input_sizes']}" if c else "-"
                 for c in calls]
        print(f"#{seq:<9} | " + " | ".join(shown))
        if len(set(shown)) > 1:
            print(f"first mismatch: collective #{seq}, not called by ranks "
                  f"{[r for r, c in enumerate(calls) if c is None]}")
            for r, c in enumerate(calls):  # the stack recorded with the call:
                stack = c.get("frames", []) if c else []  # innermost frame first
                mine = [f for f in stack if not f["filename"].startswith(torch_dir)]
                if mine:  # the first frame outside torch: the program's own line
                    where = f"{os.path.relpath(mine[0]['filename'])}:{mine[0]['line']}"
                    print(f"rank {r} issued it at {where} ({mine[0]['name']})")
            break
    else:
        sys.exit("no mismatch found in the dumps")
# --8<-- [end:compare]
os._exit(0)  # the group is broken: skip its shutdown
