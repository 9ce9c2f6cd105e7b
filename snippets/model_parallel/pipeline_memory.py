"""The activations each pipeline rank keeps for backward at its peak, for GPipe, 1F1B
and interleaved 1F1B, predicted by a formula and counted by saved-tensor hooks; and the
outputs the last stage keeps for step() to return.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/pipeline_memory.py
"""

import argparse
import copy
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
             "--nproc-per-node=2 snippets/model_parallel/pipeline_memory.py")
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
    print(f"{p} processes, {'NCCL, a GPU each' if own else 'gloo on the CPU'}; {m} "
          f"micro-batches of {B} x {H} float32:\n  {a:,} B at each stage boundary; "
          "peak: the activations a rank holds at its peak")


def chunk(s, S):  # stage s of S: layers [L s / S, L (s + 1) / S)
    return full[L * s // S:L * (s + 1) // S]
# --8<-- [end:model]


# --8<-- [start:count]
kept, counts = {}, {"peak": 0}  # kept: data_ptr -> [bytes, references]


class Kept:  # packed by the saved-tensor hook: counted while autograd keeps the tensor
    def __init__(self, t):
        self.t, self.ptr = t.detach(), t.data_ptr()  # detached: no cycle via grad_fn
        kept.setdefault(self.ptr, [t.numel() * t.element_size(), 0])[1] += 1
        counts["peak"] = max(counts["peak"], sum(n for n, _ in kept.values()))

    def __del__(self):  # autograd drops it after the backward that used it
        kept[self.ptr][1] -= 1
        kept[self.ptr][1] or kept.pop(self.ptr)


def pack(t):  # layers' outputs: not inputs and targets (no grad_fn), nor weights
    return t if t.grad_fn is None or isinstance(t._base, nn.Parameter) else Kept(t)


def unpack(k):
    return k.t if isinstance(k, Kept) else k
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
    counts["peak"] = 0
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        schedule.step(*args, **kw)  # the step that is counted
    gc.collect()
    assert not kept, "activations still kept after the step"
    # the last stage also keeps each micro-batch's output, to return them merged
    outputs = sum(t.numel() * t.element_size() for t in stages[-1].output_chunks)
    out = [None] * p
    dist.all_gather_object(out, (counts["peak"], outputs))
    return out
# --8<-- [end:run]


# --8<-- [start:predict]
def held(name, V, r):
    """Forwards whose outputs rank r keeps at its peak: GPipe all m, before the first
    backward; 1F1B the p - r of its warm-up; interleaved, torch's _get_warmup_ops and
    the forward that comes before the first backward."""
    if V == 1:
        return m if name == "GPipe" else min(m, p - r)
    return min((V - 1) * (m // max(1, m // p)) + 2 * (p - 1 - r) + 1, V * m)
# --8<-- [end:predict]


# --8<-- [start:report]
failed = []


def report(what, predicted, counted, unit):
    if rank == 0:
        print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


for name, Schedule, V in [("GPipe", ScheduleGPipe, 1), ("1F1B", Schedule1F1B, 1),
                          ("interleaved 1F1B", ScheduleInterleaved1F1B, v)]:
    out, k = run(Schedule, V), L // (V * p)  # k layers per stage: k outputs kept each
    for r in range(p):
        report(f"{name}, peak, rank {r}", held(name, V, r) * k * a,
               out[r][0], "B")
    report(f"{name}, step() outputs, rank {p - 1}", m * a,
           out[p - 1][1], "B")
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
