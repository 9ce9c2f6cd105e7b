"""Survive a crash: checkpoint atomically every few steps, and let torchrun restart the
workers.

    torchrun --standalone --nproc-per-node=2 --max-restarts=1 \
        snippets/ddp/resume.py --kill-at-step 5
"""

import argparse
import gc
import os
import shutil
import signal
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--kill-at-step", type=int, default=-1,
                    help="rank 1 kills itself there, first attempt only")
parser.add_argument("--save-final", metavar="PATH",
                    help="rank 0 saves the final weights there (model.state_dict())")
args = parser.parse_args()

if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/resume.py")

local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus:  # fewer GPUs than processes here: the processes share them
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)  # before any other CUDA work
    backend = "nccl" if gpus >= local_world else "gloo"  # NCCL: one GPU per process
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
if dist.get_rank() == 0:  # which case of the device rule ran
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")
rank = dist.get_rank()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])  # 0, then 1 after one restart
run_id = os.environ["TORCHELASTIC_RUN_ID"]  # the same in every attempt
ckpt_dir = os.path.join(tempfile.gettempdir(), "ddp-resume-" + run_id)
path = os.path.join(ckpt_dir, "last.pt")


def save_atomic(obj, path: str) -> None:
    with open(path + ".tmp", "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
# momentum: state to restore too
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

# --8<-- [start:resume]
start = 0
if os.path.exists(path):  # a restart: carry on from the last complete checkpoint
    ckpt = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optim"])
    start = ckpt["step"]
if rank == 0:
    print(f"attempt {attempt}: starting at step {start}")
# --8<-- [end:resume]

# --8<-- [start:train]
for step in range(start, args.steps):
    if step == args.kill_at_step and attempt == 0 and rank == 1:
        # a crash nobody can catch: no cleanup at all
        os.kill(os.getpid(), signal.SIGKILL)
    # the data of a step is fixed by its number
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(4, 8, generator=g).to(device)
    y = torch.randn(4, 1, generator=g).to(device)
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    if (step + 1) % 2 == 0:  # every 2 steps
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            state = {"model": model.state_dict(), "optim": opt.state_dict(),
                     "step": step + 1}
            save_atomic(state, path)
        dist.barrier()
# --8<-- [end:train]

weights = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
if rank == 0:  # the same steps in one process, on every rank's data at once
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for step in range(args.steps):
        data = [torch.Generator().manual_seed(1000 * step + r)
                for r in range(dist.get_world_size())]
        pairs = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g))
                 for g in data]
        x, y = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
        ref_opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()
    diff = (weights - torch.cat([p.detach().flatten() for p in ref.parameters()]))
    diff = diff.abs().max().item()
    verdict = ("< 1e-6: float32 round-off" if diff < 1e-6
               else ">= 1e-6: NOT equal")
    print(f"done after {args.steps} steps; against one process: {diff:.1e} ({verdict})")
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    if args.save_final:  # to compare two runs bit for bit (tests/test_ddp.py)
        torch.save(model.state_dict(), args.save_final)

del ddp, opt
gc.collect()
dist.destroy_process_group()
if rank == 0 and not diff < 1e-6:
    sys.exit("the weights differ from one process's")
