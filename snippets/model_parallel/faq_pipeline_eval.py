"""Evaluating through a pipeline schedule: step() trains, eval() only runs forward.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_pipeline_eval.py [--fix]
"""

import argparse
import copy
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true", help="evaluate with schedule.eval()")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_pipeline_eval.py")
if os.environ["WORLD_SIZE"] != "2":  # the model is cut into two stages below
    sys.exit(f"two stages, one per process: run with --nproc-per-node=2, not "
             f"{os.environ['WORLD_SIZE']}" if os.environ["RANK"] == "0" else 2)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo's send/recv fail on CUDA tensors ('Bad address'): use the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{world} stages, one per process: {backend} on {device.type}")

torch.manual_seed(0)  # the chapter's model, the same on every process
full = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                     nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
bounds = [0, 4, 7]
part = copy.deepcopy(full[bounds[rank]:bounds[rank + 1]])
stage = PipelineStage(part, stage_index=rank, num_stages=world, device=device)
schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=nn.MSELoss())
opt = torch.optim.SGD(part.parameters(), lr=0.1)
opt_ref = torch.optim.SGD(full.parameters(), lr=0.1)
x, y = torch.randn(32, 16, device=device), torch.randn(32, 4, device=device)
xv, yv = torch.randn(32, 16, device=device), torch.randn(32, 4, device=device)


def run(fn, x, y):  # the first stage feeds the input, the last computes the loss
    losses = []
    fn(x) if rank == 0 else fn(target=y, losses=losses)
    return losses


# --8<-- [start:bug]
try:  # evaluation as in a plain loop: no gradients wanted
    with torch.no_grad():
        run(schedule.step, xv, yv)
except RuntimeError as e:
    if rank == 0:
        print(textwrap.fill(f"step() under no_grad: RuntimeError: {e}", 78,
                            subsequent_indent="  "))
if not args.fix:
    val = run(schedule.step, xv, yv)  # so: step() outside no_grad
# --8<-- [end:bug]
# --8<-- [start:fix]
if args.fix:
    with torch.no_grad():  # forward only: no backward, no graph kept
        val = run(schedule.eval, xv, yv)
# --8<-- [end:fix]
left = sum(p.grad is not None and bool(p.grad.any()) for p in part.parameters())
run(schedule.step, x, y)  # then a training step
opt.step()
with torch.no_grad():  # one process: the validation loss, then one step
    val_ref = nn.functional.mse_loss(full(xv), yv)
nn.functional.mse_loss(full(x), y).backward()
opt_ref.step()
mine = full[bounds[rank]:bounds[rank + 1]]
diff = torch.tensor(max((p - q).abs().max().item()
                        for p, q in zip(part.parameters(), mine.parameters())))
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
lefts = [None] * world
dist.all_gather_object(lefts, left)
if rank == world - 1:  # the last stage holds the losses: mean of the micro-batches
    val_diff = abs(torch.stack(val).mean().item() - val_ref.item())
    same = "< 1e-6: the same loss" if val_diff < 1e-6 else ">= 1e-6: another loss"
    print(f"validation loss, diff from one process: {val_diff:.1e} ({same})",
          flush=True)
dist.barrier()
if rank == 0:
    print(f"parameters holding gradients from evaluation, per stage: {lefts}")
    verdict = ("< 1e-6: equal up to float32 round-off" if diff < 1e-6
               else ">= 1e-6: the evaluation's gradients were applied too")
    print(f"after a training step, max abs diff from one process: {diff.item():.1e}")
    print(f"  ({verdict})")
dist.destroy_process_group()
if args.fix and rank == 0 and not diff < 1e-6:  # the fix must give one process's result
    sys.exit("with --fix: not what one process gives")
