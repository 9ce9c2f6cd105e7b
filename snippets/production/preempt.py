"""Preemption: a signal sets a flag, the ranks agree at the next step boundary, save a
checkpoint and exit with a failure status. Signalled alone, the workers are restarted
by torchrun; with torchrun signalled too, as Slurm signals every process of a step,
torchrun ends and the next launch (a requeued job) resumes. Either way the job ends
where an uninterrupted one ends.

Run: OMP_NUM_THREADS=1 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone \
         --nproc-per-node=2 --max-restarts=3 snippets/production/preempt.py \
         --ckpt-dir /tmp/preempt --signal-workers-at-step 5 --wait-at-step 8
     and, once /tmp/preempt/waiting exists, kill -TERM that torchrun; then the same
     command again without the last two options (the requeued job)
"""

import argparse
import gc
import os
import signal
import sys
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
parser.add_argument("--ckpt-dir", required=True,
                    help="a folder per save in it; on several nodes, on a file system "
                         "every node mounts")
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--signal-workers-at-step", type=int, default=-1,
                    help="rank 0 sends SIGTERM to every worker there, not to torchrun")
parser.add_argument("--wait-at-step", type=int, default=-1,
                    help="rank 0 writes 'waiting' into --ckpt-dir there and waits for "
                         "a signal: the command signals torchrun, as Slurm would")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun: see the first lines of "
             "snippets/production/preempt.py")
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
# The device rule (ddp/hello.py): NCCL only if no two processes got one GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
backend = "nccl" if b"cpu" not in devices and len(devices) == world else "gloo"
if backend == "gloo":  # gloo fails on CUDA tensors in FSDP2's collectives: the CPU
    device = torch.device("cpu")
else:  # bit for bit on GPUs needs deterministic kernels (the page lists the rest)
    torch.cuda.set_device(device)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        timeout=timeout)
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
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


def play_scheduler(step):  # rank 0's part in this demo only
    if step == args.signal_workers_at_step:  # the workers alone, not torchrun
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
    else:  # the command signals torchrun, which signals the workers
        open(os.path.join(args.ckpt_dir, "waiting"), "w").close()
    deadline = time.monotonic() + 60
    while not signalled and time.monotonic() < deadline:
        time.sleep(0.01)  # here the signal has come when the step starts: no race


# --8<-- [start:loop]
model, opt = build()
os.makedirs(args.ckpt_dir, exist_ok=True)
# rank 0 picks the newest complete save (.metadata comes last) and tells the others
done = sorted(d for d in os.listdir(args.ckpt_dir)
              if os.path.exists(os.path.join(args.ckpt_dir, d, ".metadata")))
box = [done[-1] if done else None]
dist.broadcast_object_list(box, src=0)
seen = [None] * world  # every rank must see that folder: shared storage
dist.all_gather_object(seen, box[0] is None or box[0] in done)
if not all(seen):
    sys.exit(f"ranks {[r for r, s in enumerate(seen) if not s]} do not see "
             f"{box[0]}: --ckpt-dir must be shared")
step = 0
if box[0]:  # a restart, or a new launch of a requeued job: resume
    m, o = get_state_dict(model, opt)
    state = {"model": m, "optim": o, "step": 0}
    dcp.load(state, checkpoint_id=os.path.join(args.ckpt_dir, box[0]))
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    step = state["step"]
if rank == 0:
    print(f"attempt {attempt}: starting at step {step}")
while step < args.steps:
    if rank == 0 and step in (args.signal_workers_at_step, args.wait_at_step):
        play_scheduler(step)
    train_step(model, opt, step)
    step += 1
    # decide on a copy all ranks agree on: the flag itself may change any time
    stop = torch.tensor([float(signalled)], device=device)
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # one rank told: all stop here
    if stop.item():
        m, o = get_state_dict(model, opt)
        folder = os.path.join(args.ckpt_dir, f"step-{step:05d}")  # never overwritten
        dcp.save({"model": m, "optim": o, "step": step}, checkpoint_id=folder)
        if rank == 0:
            print(f"signal received: checkpoint after step {step - 1} saved, "
                  f"exiting with status {EXIT_PREEMPTED}", flush=True)  # out before
            # any SIGKILL: torchrun sends one after --shutdown-timeout
        dist.destroy_process_group()
        sys.exit(EXIT_PREEMPTED)  # not a success: torchrun or the job script acts
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
    print(f"done after {step} steps: {world} processes, {backend} on {device.type}")
    print(f"against a run never interrupted: torch.equal on all {len(ref)} tensors: "
          f"{equal}")
# --8<-- [end:compare]
del model, opt
gc.collect()
dist.destroy_process_group()
if not equal:
    sys.exit("the resumed job did not end with the uninterrupted run's weights")
