"""The traps of the zero-bubble schedules, each run: scale_grads, the V placement of ZBV
and DualPipeV, one stage per rank, too few micro-batches for DualPipeV, torch.compile.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/zero_bubble_traps.py
"""

import argparse
import copy
import gc
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (PipelineStage, ScheduleDualPipeV,
                                          ScheduleZBVZeroBubble)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/zero_bubble_traps.py")
if int(os.environ["WORLD_SIZE"]) not in (2, 3, 4, 6, 12):  # 24 layers, 2 stages each
    sys.exit("run with 2, 3, 4, 6 or 12 processes (24 layers in 2 stages per process)"
             if os.environ["RANK"] == "0" else 2)
if torch.torch_version.TorchVersion(torch.__version__) < "2.13":  # seen with 2.11
    sys.exit("needs torch 2.13 or later: torch 2.11's ZBV and DualPipeV stop at their "
             "first step over gloo ('Pair is not connected')"
             if os.environ["RANK"] == "0" else 2)
# The device rule of snippets/ddp/cost.py: NCCL only if each process has its own GPU
gpus, timeout = torch.cuda.device_count(), timedelta(seconds=60)
store, rank, p = next(dist.rendezvous("env://", timeout=timeout))
gpu = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % gpus) if gpus else None
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(gpu).uuid) if gpus
          else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(p)]))
own = b"cpu" not in devices and len(devices) == p
device = gpu if own else torch.device("cpu")
if own:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if own else "gloo", store=store, rank=rank,
                        world_size=p, timeout=timeout)

L, H, B, S = 24, 32, 4, 2 * p  # layers, width, rows per micro-batch; 2 stages per rank
m = S  # micro-batches
torch.manual_seed(0)  # every process builds the same full model and batch
full = nn.Sequential(*(nn.Sequential(nn.Linear(H, H), nn.Tanh())
                       for _ in range(L))).to(device)
x, y = torch.randn(B * m, H, device=device), torch.randn(B * m, H, device=device)
full(x).sub(y).square().mean().backward()  # the unsplit model's loss: the batch mean


def chunk(s):  # stage s of S: layers [L s / S, L (s + 1) / S)
    return full[L * s // S:L * (s + 1) // S]


def stages(*indices, wrap=lambda module: module):  # this rank's stages: copies
    return [PipelineStage(wrap(copy.deepcopy(chunk(s))), s, S, device) for s in indices]


def say(*lines):
    if rank == 0:
        print(*lines, sep="\n")


# --8<-- [start:scale]
for scale in (True, False):
    mine = stages(rank, S - 1 - rank)  # the V: stages r and 2p - 1 - r
    schedule = ScheduleZBVZeroBubble(mine, n_microbatches=m, loss_fn=nn.MSELoss(),
                                     scale_grads=scale)
    schedule.step(*([x] if rank == 0 else []),  # rank 0 holds the first and last stage
                  **(dict(target=y, losses=[]) if rank == 0 else {}))
    factor = 1 if scale else m  # scale_grads=False: the sum over micro-batches
    pairs = [pair for st in mine for pair in zip(  # each layer: here, and unsplit
        st.submod.parameters(), chunk(st.stage_index).parameters())]
    diff = torch.tensor(max(  # relative to each tensor's largest reference value
        ((a.grad - factor * b.grad).abs().max() / (factor * b.grad).abs().max()).item()
        for a, b in pairs))
    dist.all_reduce(diff, dist.ReduceOp.MAX)
    times, ok = "" if scale else f"{m} x ", diff.item() < 1e-4
    say(f"scale_grads={scale!s:5}: grads == {times}the unsplit model's, "  # mean loss
        f"max rel diff {diff.item():.1e}\n  "
        + ("(< 1e-4: equal up to float32 round-off)" if ok else "(>= 1e-4: NOT equal)"))
    assert ok, "gradients are not what scale_grads promises"
# --8<-- [end:scale]

# --8<-- [start:placement]
where = dict(sorted(schedule.stage_index_to_group_rank.items()))  # stage: its rank
say(f"V placement, stage: rank {where}")
wrong = ScheduleZBVZeroBubble(stages(rank, rank + p), n_microbatches=m)  # a loop
plan = sorted({a.stage_index for a in wrong.pipeline_order[rank] if a is not None})
say(f"ZBV given stages {[0, p]} on rank 0 (a loop): no error;\n  its plan for rank 0 "
    f"runs stages {plan}")
assert rank or plan != [0, p], "on rank 0 the V plan differs from the loop's stages"
# --8<-- [end:placement]

# --8<-- [start:refusals]
for what, make in [
        ("one stage per rank", lambda: ScheduleZBVZeroBubble(stages(rank), m)),
        (f"DualPipeV, {p} micro-batches",
         lambda: ScheduleDualPipeV(stages(rank, S - 1 - rank), n_microbatches=p)),
        ("a compiled stage", lambda: ScheduleZBVZeroBubble(
            stages(rank, S - 1 - rank, wrap=torch.compile), m))]:
    try:
        make()
        sys.exit(f"{what}: accepted")
    except (ValueError, RuntimeError) as e:
        say(f"{what}: {type(e).__name__}:", textwrap.fill(  # to 80 columns
            str(e), 80, initial_indent="  ", subsequent_indent="  ",
            break_long_words=False, break_on_hyphens=False))
# --8<-- [end:refusals]

gc.collect()
dist.destroy_process_group()
