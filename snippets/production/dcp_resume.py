"""Resume bit for bit: the whole application state (model, optimizer, LR schedule,
data position, random generators) saved with torch.distributed.checkpoint every 3 steps;
a run killed and restarted ends with the weights of a run never interrupted.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/production/dcp_resume.py --ckpt-dir /tmp/a --save-final /tmp/a.pt
     then with --max-restarts=1, --ckpt-dir /tmp/b --kill-at-step 8 --compare /tmp/a.pt
"""

import argparse
import gc
import os
import random
import signal
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict,
                                                     get_state_dict, set_state_dict)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DistributedSampler

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--ckpt-dir", required=True,
                    help="a folder per checkpoint in it; on several nodes, on a file "
                         "system every node mounts")
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--kill-at-step", type=int, default=-1,
                    help="rank 1 dies there (attempt 0)")
parser.add_argument("--save-final", metavar="PATH", help="save the whole final weights")
parser.add_argument("--compare", metavar="PATH", help="compare the final weights to it")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun: see the first lines of this program")
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
N, BATCH, EVERY = 40, 4, 3  # samples; per rank and step; steps between checkpoints

torch.manual_seed(0)  # the same initial weights and data on every rank
X, Y = torch.randn(N, 16), torch.randn(N, 1)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Dropout(0.1),
                      nn.Linear(32, 1)).to(device)
mesh = init_device_mesh(device.type, (world,))
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
sampler = DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=True,
                             seed=0, drop_last=True)
position = {"epoch": 0, "batch": 0}  # where the next step starts reading
torch.manual_seed(1 + rank)  # from here on each rank draws its own (dropout, noise)
random.seed(1 + rank)
np.random.seed(1 + rank)


# --8<-- [start:state]
class AppState(Stateful):
    """Everything a step depends on. DCP calls state_dict() when it saves and
    load_state_dict() when it loads; the model and optimizer come back sharded."""

    def state_dict(self):
        model_sd, optim_sd = get_state_dict(model, opt)
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(),
               "numpy": np.random.get_state()}
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(device)
        # a key per rank: DCP writes values that several ranks hold under one key once
        return {"model": model_sd, "optim": optim_sd, "sched": sched.state_dict(),
                "data": dict(position), f"rng/rank{rank}": rng}

    def load_state_dict(self, sd):
        set_state_dict(model, opt, model_state_dict=sd["model"],
                       optim_state_dict=sd["optim"])
        sched.load_state_dict(sd["sched"])
        position.update(sd["data"])
        rng = sd[f"rng/rank{rank}"]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        if device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], device)
# --8<-- [end:state]


# --8<-- [start:resume]
state = {"app": AppState()}
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
if box[0]:
    dcp.load(state, checkpoint_id=os.path.join(args.ckpt_dir, box[0]))
    step = int(box[0].split("-")[1])
if rank == 0:
    print(f"attempt {attempt}: starting at step {step}, epoch {position['epoch']}, "
          f"batch {position['batch']}, lr {sched.get_last_lr()[0]:.6f}")
# --8<-- [end:resume]

# --8<-- [start:train]
while step < args.steps:
    sampler.set_epoch(position["epoch"])  # the epoch's shuffle, also after a restart
    order = list(sampler)
    for b in range(position["batch"], len(order) // BATCH):
        if step == args.kill_at_step and attempt == 0 and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash nothing can intercept
        idx = order[b * BATCH:(b + 1) * BATCH]
        noise = torch.from_numpy(np.random.normal(0, 0.01, (BATCH, 16))).float()
        x = (X[idx] + noise) * (1 if random.random() < 0.5 else -1)  # three generators
        nn.functional.mse_loss(model(x.to(device)), Y[idx].to(device)).backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        step, position["batch"] = step + 1, b + 1
        if step % EVERY == 0:
            folder = os.path.join(args.ckpt_dir, f"step-{step:05d}")
            dcp.save(state, checkpoint_id=folder)
            if rank == 0:
                print(f"saved step-{step:05d}")
        if step == args.steps:
            break
    else:  # the epoch ran to its end
        position.update(epoch=position["epoch"] + 1, batch=0)
# --8<-- [end:train]

# --8<-- [start:final]
full = get_model_state_dict(  # every rank takes part; rank 0 gets the whole tensors
    model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
equal = True
if rank == 0 and args.save_final:
    torch.save(full, args.save_final)
if rank == 0:
    print(f"done after {step} steps: {world} processes, {backend} on {device.type}")
if rank == 0 and args.compare:
    ref = torch.load(args.compare, weights_only=True)
    equal = ref.keys() == full.keys() and all(torch.equal(ref[k], full[k]) for k in ref)
    print(f"final weights against the uninterrupted run: "
          f"torch.equal on all {len(ref)} tensors: {equal}")
# --8<-- [end:final]
del model, opt
gc.collect()
dist.destroy_process_group()
if not equal:
    sys.exit("the resumed run did not end with the uninterrupted run's weights")
