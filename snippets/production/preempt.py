"""Preemption: SIGTERM sets a flag, the ranks agree at the next step boundary,
checkpoint, and exit with a status that torchrun restarts; the resumed job ends where an
uninterrupted one ends.

Run: OMP_NUM_THREADS=1 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone \
         --nproc-per-node=2 --max-restarts=1 snippets/production/preempt.py \
         --preempt-at-step 5
"""

import argparse
import gc
import os
import shutil
import signal
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict,
                                                     get_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--preempt-at-step", type=int, default=-1,
                    help="rank 0 plays the scheduler there: SIGTERM to every worker")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun: see the first lines of "
             "snippets/production/preempt.py")
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
run_id = os.environ["TORCHELASTIC_RUN_ID"]  # the same in every attempt
ckpt_dir = os.path.join(tempfile.gettempdir(), "preempt-" + run_id)
EXIT_PREEMPTED = 128 + signal.SIGTERM  # 143, as if SIGTERM had killed it: not a success

# --8<-- [start:handler]
signalled = False  # set by the handler, at any moment


def on_signal(signum, frame):  # do nothing here but note it: the loop decides
    global signalled
    signalled = True


signal.signal(signal.SIGTERM, on_signal)  # preemption, scancel, the time limit
signal.signal(signal.SIGUSR1, on_signal)  # sbatch --signal=USR1@90: 90 s left
# --8<-- [end:handler]
pids = [None] * world
dist.all_gather_object(pids, os.getpid())


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    fully_shard(model, mesh=init_device_mesh(device.type, (world,)))
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def train_step(model, opt, step):
    g = torch.Generator().manual_seed(1000 * step + rank)  # data: a function of step
    x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
    nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
    opt.step()
    opt.zero_grad()


# --8<-- [start:loop]
model, opt = build()
step = 0
if os.path.exists(os.path.join(ckpt_dir, ".metadata")):  # a restart: resume
    m, o = get_state_dict(model, opt)
    state = {"model": m, "optim": o, "step": 0}
    dcp.load(state, checkpoint_id=ckpt_dir)
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    step = state["step"]
if rank == 0:
    print(f"attempt {attempt}: starting at step {step}")
while step < args.steps:
    if step == args.preempt_at_step and attempt == 0 and rank == 0:
        for pid in pids:  # the scheduler's part: Slurm signals every process of the job
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not signalled and time.monotonic() < deadline:
            time.sleep(0.01)  # here the signal has come when the step starts: no race
    train_step(model, opt, step)
    step += 1
    # decide on a copy all ranks agree on: the flag itself may change any time
    stop = torch.tensor([float(signalled)], device=device)
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # one rank told: all stop here
    if stop.item():
        m, o = get_state_dict(model, opt)
        dcp.save({"model": m, "optim": o, "step": step}, checkpoint_id=ckpt_dir)
        if rank == 0:
            print(f"signal received: checkpoint after step {step - 1} saved, "
                  f"exiting with status {EXIT_PREEMPTED}")
        dist.destroy_process_group()
        sys.exit(EXIT_PREEMPTED)  # non-zero: torchrun restarts, Slurm can requeue
# --8<-- [end:loop]

# --8<-- [start:compare]
full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                            cpu_offload=True))
model, opt = build()  # the same run again in these processes, never interrupted
for s in range(args.steps):
    train_step(model, opt, s)
ref = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                           cpu_offload=True))
equal = all(torch.equal(full[k], ref[k]) for k in ref)
if rank == 0:
    print(f"done after {step} steps; against a run never interrupted: "
          f"torch.equal on all {len(ref)} tensors: {equal}")
    shutil.rmtree(ckpt_dir, ignore_errors=True)
# --8<-- [end:compare]
del model, opt
gc.collect()
dist.destroy_process_group()
if not equal:
    sys.exit("the resumed job did not end with the uninterrupted run's weights")
