"""Train on nodes that may come and go: each step's batch is split over however
many processes the rendezvous gave, a checkpoint every 2 steps, and at the end
rank 0 compares the weights with one process trained on the whole batch.

    torchrun --nnodes=1:2 --nproc-per-node=2 --max-restarts=1 --rdzv-backend=c10d \
        --rdzv-endpoint=host1:29400 --rdzv-id=job1 snippets/ddp/elastic.py \
        --ckpt-dir /shared/checkpoints
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
parser.add_argument("--ckpt-dir", default=tempfile.gettempdir(),
                    help="where to keep the checkpoint (in a folder named after the "
                         "job id, removed at the end); on several nodes, a folder on a "
                         "file system every node mounts, not the default: this "
                         "machine's temporary folder")
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
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before any other CUDA work
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=args.timeout)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
own = b"cpu" not in devices and len(devices) == world  # a GPU of its own each
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        timeout=timeout)
node = int(os.environ["GROUP_RANK"])  # this node's number in this attempt
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if args.batch % world:
    sys.exit(f"--batch {args.batch} does not split over {world} processes")

# --8<-- [start:who]
hosts = [None] * world
dist.all_gather_object(hosts, socket.gethostname())  # who ended up where
# --8<-- [end:who]
run_id = os.environ["TORCHELASTIC_RUN_ID"]  # the same in every attempt
ckpt_dir = os.path.join(args.ckpt_dir, "ddp-elastic-" + run_id)
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
# --8<-- [start:resume]
ckpt = None
if rank == 0 and os.path.exists(path):  # rank 0 decides: a restart, from this file
    ckpt = torch.load(path, map_location=device, weights_only=True)
start = [ckpt["step"] if ckpt else 0]
dist.broadcast_object_list(start, src=0)  # every rank starts where rank 0 starts
start = start[0]
if start and rank != 0 and os.path.exists(path):
    ckpt = torch.load(path, map_location=device, weights_only=True)
read = [None] * world  # the step each rank found: a folder of its own node's shows here
dist.all_gather_object(read, ckpt["step"] if ckpt else 0)
# every rank says why: torchrun stops the others as soon as one exits
if read != [start] * world:
    sys.exit(f"rank 0 resumes at step {start} from {path}, but the ranks read the "
             f"steps {read} there: --ckpt-dir must be a folder every node shares")
if ckpt:
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optim"])
# --8<-- [end:resume]
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
    verdict = ("< 1e-6: float32 round-off" if diff < 1e-6
               else ">= 1e-6: NOT equal")  # NaN too
    print(f"done after {args.steps} steps; against one process: {diff:.1e} ({verdict})")
    shutil.rmtree(ckpt_dir, ignore_errors=True)

del ddp, opt
gc.collect()
dist.destroy_process_group()
if rank == 0 and not diff < 1e-6:
    sys.exit("the weights differ from one process's")
