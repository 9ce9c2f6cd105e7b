"""Train on nodes that may come and go: each step's batch is split over however
many processes the rendezvous gave, a checkpoint every 2 steps, and at the end
rank 0 compares the weights with one process trained on the whole batch.

    torchrun --nnodes=1:2 --nproc-per-node=2 --max-restarts=1 --rdzv-backend=c10d \
        --rdzv-endpoint=host1:29400 --rdzv-id=job1 snippets/ddp/elastic.py
"""

import argparse
import gc
import os
import shutil
import signal
import socket
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--batch", type=int, default=8,
                    help="samples per step, all ranks together")
parser.add_argument("--timeout", type=float, default=60,
                    help="seconds for the process group to form and per collective")
parser.add_argument("--crash-node-at-step", type=int, default=-1,
                    help="node 1 goes down there, first attempt only: its torchrun "
                         "agent and its processes are killed (SIGKILL), as in a "
                         "power cut")
args = parser.parse_args()

if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/elastic.py")

local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])
gpus = torch.cuda.device_count()
if gpus:  # fewer GPUs than processes here: the processes share them
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)
    backend = "nccl" if gpus >= local_world else "gloo"  # NCCL: one GPU per process
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
rank, world = dist.get_rank(), dist.get_world_size()
node = int(os.environ["GROUP_RANK"])  # this node's number in this attempt
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if args.batch % world:
    sys.exit(f"--batch {args.batch} does not split over {world} processes")

# --8<-- [start:who]
hosts = [None] * world
dist.all_gather_object(hosts, socket.gethostname())  # who ended up where
# --8<-- [end:who]
run_id = os.environ["TORCHELASTIC_RUN_ID"]  # the same in every attempt
ckpt_dir = os.path.join(tempfile.gettempdir(), "ddp-elastic-" + run_id)
path = os.path.join(ckpt_dir, "last.pt")


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)  # a step's whole batch: fixed by the step
    x = torch.randn(args.batch, 8, generator=g)
    return x, torch.randn(args.batch, 1, generator=g)


def save_atomic(obj, path: str) -> None:
    with open(path + ".tmp", "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


model = make_model().to(device)
ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
start = 0
if os.path.exists(path):  # a restart: carry on from the last complete checkpoint
    ckpt = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optim"])
    start = ckpt["step"]
if rank == 0:
    where = ", ".join(f"{h}: {hosts.count(h)}" for h in dict.fromkeys(hosts))
    print(f"attempt {attempt}: {world} processes ({where}), starting at step {start}")

# --8<-- [start:train]
per_rank = args.batch // world  # the same batch, split over however many ranks
for step in range(start, args.steps):
    if step == args.crash_node_at_step and attempt == 0 and node == 1:
        if local_rank == 0:
            os.kill(os.getppid(), signal.SIGKILL)  # this node's torchrun agent
        os.kill(os.getpid(), signal.SIGKILL)
    x, y = batch(step)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    opt.zero_grad(set_to_none=True)
    # DDP averages the gradients over ranks: with equal shares, the whole batch's mean
    loss = nn.functional.mse_loss(ddp(x[mine].to(device)), y[mine].to(device))
    loss.backward()
    opt.step()
    if (step + 1) % 2 == 0:  # every 2 steps
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            save_atomic({"model": model.state_dict(), "optim": opt.state_dict(),
                         "step": step + 1}, path)
        dist.barrier()
# --8<-- [end:train]

if rank == 0:  # the same steps in one process, on the whole batch each step
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for step in range(args.steps):
        x, y = batch(step)
        ref_opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()
    diff = max((p.detach().cpu() - q.detach()).abs().max().item()
               for p, q in zip(model.parameters(), ref.parameters()))
    verdict = "< 1e-6: equal up to float32 round-off" if diff < 1e-6 else "NOT equal"
    print(f"done after {args.steps} steps; against one process: "
          f"max abs diff {diff:.1e} ({verdict})")
    shutil.rmtree(ckpt_dir, ignore_errors=True)

del ddp, opt
gc.collect()
dist.destroy_process_group()
if rank == 0 and diff >= 1e-6:
    sys.exit("the weights differ from one process's")
