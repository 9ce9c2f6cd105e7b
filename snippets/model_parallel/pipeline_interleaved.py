"""Interleaved 1F1B: several pipeline stages per process (virtual stages). Gradients of
GPipe, 1F1B and interleaved 1F1B compared with the unsplit model; their bubble from the
formula and from a replay of the order each process actually ran.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/pipeline_interleaved.py
"""

import argparse
import copy
import gc
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/pipeline_interleaved.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if world < 2 or 24 % (2 * world):  # 24 layers cut into 2 stages per process
    sys.exit(f"run with 2, 3, 4, 6 or 12 processes (a pipeline of 2 stages per process "
             f"over 24 layers), not {world}" if rank == 0 else 2)
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo's send/recv fail on CUDA tensors ('Bad address'): use the CPU
    device, backend = torch.device("cpu"), "gloo"
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")

# --8<-- [start:model]
p, v = world, 2  # p processes; interleaved: v stages (model chunks) per process
m = 2 * p  # micro-batches per step
torch.manual_seed(0)  # every process builds the same full model
full = nn.Sequential(*(nn.Sequential(nn.Linear(16, 16), nn.Tanh())
                       for _ in range(24))).to(device)
x = torch.randn(4 * m, 16, device=device)
y = torch.randn(4 * m, 16, device=device)
full(x).sub(y).square().mean().backward()  # the reference gradients


def chunk(i, n):
    """Stage i of n: layers [24 i / n, 24 (i + 1) / n) of the full model."""
    return full[24 * i // n:24 * (i + 1) // n]


def stages(indices, n):
    return [PipelineStage(copy.deepcopy(chunk(i, n)), stage_index=i, num_stages=n,
                          device=device) for i in indices]
# --8<-- [end:model]


# --8<-- [start:log]
def log_actions(stage, log):
    """Wrap the stage's compute calls to log (kind, stage, micro-batch), in order."""
    fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk

    def forward_one_chunk(mb, *args, **kwargs):
        log.append(("F", stage.stage_index, mb))
        return fwd(mb, *args, **kwargs)

    def backward_one_chunk(mb, *args, **kwargs):
        log.append(("B", stage.stage_index, mb))
        return bwd(mb, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
# --8<-- [end:log]


# --8<-- [start:schedules]
def run(make_schedule, my_stages):
    log = []
    for s in my_stages:
        log_actions(s, log)
    schedule = make_schedule(my_stages, n_microbatches=m, loss_fn=nn.MSELoss())
    args = (x,) if rank == 0 else ()  # rank 0 holds stage 0: the input
    # the last rank holds the last stage: the targets
    kwargs = dict(target=y, losses=[]) if rank == p - 1 else {}
    schedule.step(*args, **kwargs)  # the step that is checked and replayed
    n_stages = my_stages[0].num_stages
    diff = max((a.grad - b.grad).abs().max() / b.grad.abs().max()  # relative to each
               for s in my_stages for a, b in  # tensor's largest reference value
               zip(s.submod.parameters(), chunk(s.stage_index, n_stages).parameters()))
    n = len(log)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(5):  # more steps, only to time them (the first one set up)
        schedule.step(*args, **kwargs)
    dist.barrier()
    seconds = (time.perf_counter() - start) / 5
    del log[n:]
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)  # the worst over all stages
    logs = [None] * p
    dist.all_gather_object(logs, log)  # every process's order, for the replay
    return logs, n_stages, seconds, diff.item()


results = {
    "GPipe": run(lambda s, **kw: ScheduleGPipe(s[0], **kw), stages([rank], p)),
    "1F1B": run(lambda s, **kw: Schedule1F1B(s[0], **kw), stages([rank], p)),
    # stages rank, rank + p, ...: the model goes round the processes v times
    "interleaved 1F1B": run(ScheduleInterleaved1F1B,
                            stages([rank + k * p for k in range(v)], v * p)),
}
# --8<-- [end:schedules]


# --8<-- [start:replay]
def replay(logs, n_stages):
    """Start each logged action as soon as its process is free and its input is there
    (a forward needs the previous stage's forward, a backward the next stage's
    backward); forward of a whole process's layers = 1, backward = 2, sends free.
    Returns each process's busy intervals and the step's length."""
    cost = {"F": p / n_stages, "B": 2 * p / n_stages}
    done, busy, free, nxt = {}, [[] for _ in logs], [0.0] * p, [0] * p
    while any(nxt[r] < len(logs[r]) for r in range(p)):
        moved = False
        for r, log in enumerate(logs):
            while nxt[r] < len(log):
                kind, s, mb = log[nxt[r]]
                needs = {"F": ("F", s - 1, mb), "B": ("B", s + 1, mb)}[kind]
                if needs[1] in (-1, n_stages):  # first stage's F, last stage's B
                    ready = done[("F", s, mb)] if kind == "B" else 0.0
                elif needs in done:
                    ready = done[needs]
                else:
                    break  # waits for another process
                start = max(free[r], ready)
                free[r] = done[(kind, s, mb)] = start + cost[kind]
                busy[r].append((start, free[r], kind, s))
                nxt[r] += 1
                moved = True
        assert moved, "the logged order deadlocks"
    return busy, max(free)


formula = {"GPipe": (p - 1) / (m + p - 1), "1F1B": (p - 1) / (m + p - 1),
           "interleaved 1F1B": (p - 1) / (v * m + p - 1)}
if rank == 0:
    print(f"p={p} processes, m={m} micro-batches; interleaved: v={v} stages each")
    print(f"{'schedule':17} {'grads: max rel diff':>25} {'bubble: formula':>16} "
          f"{'replay':>7} {'time here':>10}")
    rows = []
    for name, (logs, n_stages, seconds, diff) in results.items():
        busy, length = replay(logs, n_stages)
        idle = 1 - sum(b - a for r in busy for a, b, *_ in r) / (p * length)
        ratio = seconds / results["GPipe"][2]
        verdict = "(< 1e-4: equal)" if diff < 1e-4 else "(>= 1e-4: NOT equal)"
        print(f"{name:17} {diff:9.1e} {verdict:15} {formula[name]:16.1%} {idle:7.1%} "
              f"{ratio:9.2f}x")
        # one character = a forward of 1/v of a process's layers
        for r in range(p):
            row = ["."] * round(length * v)
            for a, b, kind, s in busy[r]:
                row[round(a * v):round(b * v)] = (kind if s < p else kind.lower()) * (
                    round(b * v) - round(a * v))
            rows.append(f"  {name if r == 0 else '':17} rank {r} {''.join(row)}")
    print("the replays (F, B: a process's first stage; f, b: its second; . idle)")
    print("\n".join(rows))
# --8<-- [end:replay]

wrong = [name for name, result in results.items() if result[3] >= 1e-4]
del results
gc.collect()
dist.destroy_process_group()
if wrong:
    sys.exit(f"gradients not the unsplit model's (max rel diff >= 1e-4): {wrong}")
