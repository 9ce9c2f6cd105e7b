"""What a pipeline step costs: bytes sent between stages, sends per rank and idle slots
for GPipe, 1F1B and interleaved 1F1B, each predicted by a formula and counted in the
run; gradients compared with the unsplit model.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/pipeline_cost.py
"""

import argparse
import copy
import functools
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/pipeline_cost.py")
if int(os.environ["WORLD_SIZE"]) not in (2, 3, 4, 6, 12):  # 24 layers, 2 stages each
    sys.exit("run with 2, 3, 4, 6 or 12 processes (24 layers in 2 stages per process)"
             if os.environ["RANK"] == "0" else 2)
# The device rule of snippets/ddp/cost.py: NCCL only if each process has a GPU of its
# own, else gloo on the CPU (gloo's sends fail on CUDA tensors)
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

# --8<-- [start:model]
L, H, B, v = 24, 32, 4, 2  # layers, width, rows per micro-batch; interleaved: v
m, a = 2 * p, B * H * 4  # micro-batches; bytes of one micro-batch's activation
torch.manual_seed(0)  # every process builds the same full model and batch
full = nn.Sequential(*(nn.Sequential(nn.Linear(H, H), nn.Tanh())
                       for _ in range(L))).to(device)
x, y = torch.randn(B * m, H, device=device), torch.randn(B * m, H, device=device)
full(x).sub(y).square().mean().backward()  # the reference gradients
if rank == 0:
    print(f"{p} processes, {'NCCL, a GPU each' if own else 'gloo on the CPU'};\n  {m} "
          f"micro-batches of {B} x {H} float32: {a:,} B at each stage boundary")


def chunk(s, S):  # stage s of S: layers [L s / S, L (s + 1) / S)
    return full[L * s // S:L * (s + 1) // S]
# --8<-- [end:model]


# --8<-- [start:count]
counts = {}


def sent(kind, ops):  # the sends (P2POp) a stage hands to the schedule, which runs them
    counts[kind] += sum(op.tensor.numel() * op.tensor.element_size() for op in ops)
    counts["sends"] += len(ops)
    return ops


def watch(stage, log):  # log each forward and backward, count each send
    f, b, s = stage.forward_one_chunk, stage.backward_one_chunk, stage.stage_index
    fs, bs = stage.get_fwd_send_ops, stage.get_bwd_send_ops
    stage.forward_one_chunk = lambda mb, *args, **kw: (
        log.append(("F", s, mb)) or f(mb, *args, **kw))
    stage.backward_one_chunk = lambda mb, *args, **kw: (
        log.append(("B", s, mb)) or b(mb, *args, **kw))
    stage.get_fwd_send_ops = lambda mb: sent("F", fs(mb))
    stage.get_bwd_send_ops = lambda mb: sent("B", bs(mb))
# --8<-- [end:count]


# --8<-- [start:run]
def run(Schedule, V):
    """One counted step, after one that sets the stages up; each rank's counts."""
    S = V * p  # stages in all; this rank holds rank, rank + p, ...
    stages = [PipelineStage(copy.deepcopy(chunk(s, S)), s, S, device)
              for s in range(rank, S, p)]
    schedule = Schedule(stages if V > 1 else stages[0], n_microbatches=m,
                        loss_fn=nn.MSELoss())
    args = [x] if rank == 0 else []  # the first stage gets the input, the last targets
    kw = dict(target=y, losses=[]) if rank == p - 1 else {}
    schedule.step(*args, **kw)
    diff = max(((a.grad - b.grad).abs().max() / b.grad.abs().max()).item()  # relative
               for st in stages for a, b in  # to each tensor's largest reference value
               zip(st.submod.parameters(), chunk(st.stage_index, S).parameters()))
    log = []
    for st in stages:
        watch(st, log)
    counts.update(F=0, B=0, sends=0)
    schedule.step(*args, **kw)  # the step that is counted
    out = [None] * p
    dist.all_gather_object(out, (log, counts, diff))
    return out
# --8<-- [end:run]


# --8<-- [start:replay]
def replay(logs, S):
    """Replay each rank's order in slots: 1 slot = the forward of L / (v p) layers, a
    backward twice its forward; an action starts when its rank is done with the one
    before and its input is there. Returns (slots per step, idle slots per rank)."""
    cost = {"F": v * p // S, "B": 2 * v * p // S}
    where = {act: (r, i) for r, log in enumerate(logs) for i, act in enumerate(log)}

    @functools.cache
    def end(act):
        kind, s, mb = act
        r, i = where[act]
        need = ("F", s - 1, mb) if kind == "F" else ("B", s + 1, mb)
        if need[1] in (-1, S):  # first stage's forward, last stage's backward
            need = ("F", s, mb) if kind == "B" else None
        after = end(logs[r][i - 1]) if i else 0  # this rank's previous action
        return cost[kind] + max(after, end(need) if need else 0)

    slots = max(end(log[-1]) for log in logs)
    idle = {slots - sum(cost[kind] for kind, _, _ in log) for log in logs}
    return slots, idle.pop() if len(idle) == 1 else -1  # the same work on every rank
# --8<-- [end:replay]


# --8<-- [start:report]
failed = []


def report(what, predicted, counted, unit):  # unit: "B", or a word in the singular
    p, c = (f"{n:,} {unit}" + ("" if n == 1 or unit == "B" else "s")
            for n in (predicted, counted))
    if rank == 0:
        print(f"{what}: predicted {p}, counted {c}")
    if predicted != counted:
        failed.append(what)


for name, Schedule, V in [("GPipe", ScheduleGPipe, 1), ("1F1B", Schedule1F1B, 1),
                          ("interleaved 1F1B", ScheduleInterleaved1F1B, v)]:
    out, S = run(Schedule, V), V * p
    for kind, what in [("F", "activations sent"), ("B", "gradients sent")]:
        report(f"{name}, {what} per step", (S - 1) * m * a,
               sum(o[1][kind] for o in out), "B")
    for r in range(p):  # a send per micro-batch for each stage with a next / a previous
        report(f"{name}, sends per step, rank {r}", m * sum(
            (s < S - 1) + (s > 0) for s in range(r, S, p)), out[r][1]["sends"], "send")
    slots, idle = replay([o[0] for o in out], S)
    report(f"{name}, idle slots per rank", 3 * (p - 1) * v // V, idle, "slot")
    if rank == 0:
        print(f"{name}, bubble: {idle} of {slots} slots = {idle / slots:.1%}; "
              f"(p-1)/({'v*' if V > 1 else ''}m+p-1) = {(p - 1) / (V * m + p - 1):.1%}")
    diff = max(o[2] for o in out)
    if rank == 0:
        print(f"{name}, grads max rel diff {diff:.1e} " + (
            "(< 1e-4: as the unsplit model)" if diff < 1e-4
            else "(>= 1e-4: NOT the unsplit model's)"))
    if diff >= 1e-4:
        failed.append(f"{name}, gradients")
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
