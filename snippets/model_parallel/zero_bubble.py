"""Zero-bubble pipeline schedules beside GPipe, 1F1B and interleaved 1F1B: their plans
(backward split in I and W), gradients vs the unsplit model, idle slots from the order.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/zero_bubble.py
"""

import argparse
import copy
import functools
import gc
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage, Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe,
    ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/zero_bubble.py")
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

# --8<-- [start:model]
L, H, B = 24, 32, 4  # layers, width, rows per micro-batch
m = 2 * p  # micro-batches: DualPipeV needs at least one per stage, 2p
torch.manual_seed(0)  # every process builds the same full model and batch
full = nn.Sequential(*(nn.Sequential(nn.Linear(H, H), nn.Tanh())
                       for _ in range(L))).to(device)
x, y = torch.randn(B * m, H, device=device), torch.randn(B * m, H, device=device)
full(x).sub(y).square().mean().backward()  # the reference gradients


def chunk(s, S):  # stage s of S: layers [L s / S, L (s + 1) / S)
    return full[L * s // S:L * (s + 1) // S]


def holds(style, r):  # the stages rank r holds: one, a loop, or a V
    return {"one": [r], "loop": [r, r + p], "V": [r, 2 * p - 1 - r]}[style]
# --8<-- [end:model]


# --8<-- [start:log]
def watch(stage, log):  # log each forward F, backward (full B or input I), weight W
    def wrap(name, kind):  # kind: the letter logged, from the call's keyword arguments
        fn = getattr(stage, name)
        setattr(stage, name, lambda mb, *a, **k: (
            log.append((kind(k), stage.stage_index, mb)) or fn(mb, *a, **k)))
    wrap("forward_one_chunk", lambda k: "F")
    wrap("backward_one_chunk", lambda k: "BI"[k.get("full_backward") is False])
    wrap("backward_weight_one_chunk", lambda k: "W")
# --8<-- [end:log]


# --8<-- [start:run]
def run(Schedule, style):
    """One step; every rank's logged order, and the largest relative gradient
    difference: max |grad - reference| / max |reference| of each tensor."""
    S, mine = (p if style == "one" else 2 * p), holds(style, rank)
    stages = [PipelineStage(copy.deepcopy(chunk(s, S)), s, S, device) for s in mine]
    schedule = Schedule(stages if len(stages) > 1 else stages[0], n_microbatches=m,
                        loss_fn=nn.MSELoss())
    log = []
    for st in stages:
        watch(st, log)
    schedule.step(*([x] if 0 in mine else []),
                  **(dict(target=y, losses=[]) if S - 1 in mine else {}))
    diff = max(((a.grad - b.grad).abs().max() / b.grad.abs().max()).item()  # relative
               for st in stages for a, b in  # to each tensor's largest reference value
               zip(st.submod.parameters(), chunk(st.stage_index, S).parameters()))
    out = [None] * p
    dist.all_gather_object(out, (log, diff))
    return schedule, [o[0] for o in out], max(o[1] for o in out)
# --8<-- [end:run]


# --8<-- [start:replay]
def replay(logs, S):
    """(start, end) in slots of each logged action: F, I or W of a stage of L / 2p
    layers takes 1 slot, B 2; each starts once its rank is free and its input there."""
    size = 2 * p // S  # 2 for GPipe and 1F1B, whose stages have twice the layers
    cost = {"F": size, "I": size, "W": size, "B": 2 * size}
    where = {act: (r, i) for r, log in enumerate(logs) for i, act in enumerate(log)}

    @functools.cache
    def end(act):
        kind, s, mb = act
        r, i = where[act]
        need = {"F": [("F", s - 1, mb)], "W": [("I", s, mb)]}.get(kind, [
            ("I", s + 1, mb), ("B", s + 1, mb)] if s < S - 1 else [("F", s, mb)])
        after = end(logs[r][i - 1]) if i else 0  # this rank's previous action
        return cost[kind] + max([after] + [end(n) for n in need if n in where])

    return [[(end(a) - cost[a[0]], end(a)) for a in log] for log in logs]
# --8<-- [end:replay]


# --8<-- [start:report]
if rank == 0:
    print(f"{p} processes, {'NCCL' if own else 'gloo on the CPU'}, {m} micro-batches")
failed = []  # predicted idle slots per rank: k (p - 1), k = 3v, 3 or 1 (v = 2)


def many(n):
    return f"{n:,} slot" + ("" if n == 1 else "s")


for name, Schedule, style, k in [
        ("GPipe", ScheduleGPipe, "one", 6), ("1F1B", Schedule1F1B, "one", 6),
        ("interleaved 1F1B", ScheduleInterleaved1F1B, "loop", 3),
        ("interleaved zero bubble", ScheduleInterleavedZeroBubble, "loop", 1),
        ("ZBV", ScheduleZBVZeroBubble, "V", 1),
        ("DualPipeV", ScheduleDualPipeV, "V", 1)]:
    schedule, logs, diff = run(Schedule, style)
    spans = replay(logs, p if style == "one" else 2 * p)
    busy = [sum(e - s for s, e in sp) for sp in spans]  # slots of work, each rank
    slots = max(sp[-1][1] for sp in spans)  # the step ends when the last rank ends
    gaps = [sp[-1][1] - sp[0][0] - n for sp, n in zip(spans, busy)]  # inside a span
    if rank == 0:
        if style == "V":  # the schedule's own plan for rank 0: its _Action objects
            plan = [a for a in schedule.pipeline_order[0] if a is not None]
            print(textwrap.fill(f"{name}, plan of rank 0: {' '.join(map(str, plan))}",
                                80, subsequent_indent="  ", break_on_hyphens=False))
        print(f"{name}, idle slots per rank: predicted {many(k * (p - 1))}, counted "
              f"{many(slots - busy[0])}\n{name}, bubble: {slots - busy[0]} "
              f"of {slots} slots = {(slots - busy[0]) / slots:.1%};\n  idle between a "
              f"rank's first and last action: {', '.join(map(str, gaps))}\n{name}, "
              f"grads max rel diff {diff:.1e}\n  " + ("(< 1e-4: as the unsplit model)"
              if diff < 1e-4 else "(>= 1e-4: NOT the unsplit model's)"))
        for r, sp in enumerate(spans):  # a letter per slot: lower case for a rank's
            row = {t: a[0].lower() if a[1] >= p else a[0]  # second stage, "." idle
                   for a, (s, e) in zip(logs[r], sp) for t in range(s, e)}
            print(f"  rank {r} {''.join(row.get(t, '.') for t in range(slots))}")
    if diff >= 1e-4 or len(set(busy)) > 1 or slots - busy[0] != k * (p - 1):
        failed.append(name)
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted, or gradients not the unsplit model's: {failed}")
