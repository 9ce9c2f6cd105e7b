"""The activations each rank keeps for backward at its peak, for 1F1B, interleaved 1F1B
and the zero-bubble schedules: counted by saved-tensor hooks, predicted from the order
each rank ran, and what the peak would be had each input backward freed them.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/zero_bubble_memory.py
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
from torch.distributed.pipelining import (
    PipelineStage, Schedule1F1B, ScheduleDualPipeV, ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/zero_bubble_memory.py")
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

L, H, B = 24, 32, 4  # layers, width, rows per micro-batch
m, a = 2 * p, B * H * 4  # micro-batches; bytes of one layer's output per micro-batch
torch.manual_seed(0)  # every process builds the same full model and batch
full = nn.Sequential(*(nn.Sequential(nn.Linear(H, H), nn.Tanh())
                       for _ in range(L))).to(device)
x, y = torch.randn(B * m, H, device=device), torch.randn(B * m, H, device=device)


def chunk(s, S):  # stage s of S: layers [L s / S, L (s + 1) / S)
    return full[L * s // S:L * (s + 1) // S]


# --8<-- [start:count]
kept, counts = {}, {"peak": 0}  # kept: data_ptr -> [bytes, references]


class Kept:  # packed by the saved-tensor hook: counted while autograd keeps the tensor
    def __init__(self, t):  # a detached view: holding t itself would close a cycle
        self.t, self.ptr = t.detach(), t.data_ptr()  # t -> grad_fn -> saved -> t
        kept.setdefault(self.ptr, [t.numel() * t.element_size(), 0])[1] += 1
        counts["peak"] = max(counts["peak"], sum(n for n, _ in kept.values()))

    def __del__(self):  # autograd drops it with the last node that saved it
        kept[self.ptr][1] -= 1
        kept[self.ptr][1] or kept.pop(self.ptr)


def pack(t):  # layers' outputs: not inputs and targets (no grad_fn), nor weights
    return t if t.grad_fn is None or isinstance(t._base, nn.Parameter) else Kept(t)


def unpack(k):
    return k.t if isinstance(k, Kept) else k
# --8<-- [end:count]


KINDS = {"forward_one_chunk": lambda k: "F", "backward_weight_one_chunk": lambda k: "W",
         "backward_one_chunk": lambda k: "BI"[k.get("full_backward") is False]}


def run(Schedule, mine, S):
    """One step to set the stages up, one counted: each rank's order and peak."""
    stages = [PipelineStage(copy.deepcopy(chunk(s, S)), s, S, device) for s in mine]
    schedule = Schedule(stages if len(stages) > 1 else stages[0], n_microbatches=m,
                        loss_fn=nn.MSELoss())
    args, kw = [x] if 0 in mine else [], dict(target=y) if S - 1 in mine else {}
    schedule.step(*args, **kw)
    log, counts["peak"] = [], 0
    for st in stages:  # log each F, B, I and W with its stage, as zero_bubble.py does
        for name, kind in KINDS.items():
            fn = getattr(st, name)
            setattr(st, name, lambda mb, *a, fn=fn, kind=kind, s=st.stage_index, **k: (
                log.append((kind(k), s)) or fn(mb, *a, **k)))
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        schedule.step(*args, **kw)
    gc.collect()
    assert not kept, "activations still kept after the step"
    out = [None] * p
    dist.all_gather_object(out, (log, counts["peak"]))
    return out


# --8<-- [start:predict]
def held(log, k, freed_by_i):
    """Peak bytes from the order: a forward keeps k outputs of its stage's k layers; B
    frees them; I frees what freed_by_i says, W the rest. In torch 2.13 I drops the
    stage's own output, W all else; on stage 0, I computes nothing and W all."""
    now = peak = 0
    for kind, s in log:
        i = freed_by_i(s)
        now += {"F": k, "B": -k, "I": -i, "W": i - k}[kind]
        peak = max(peak, now)
    return peak * a
# --8<-- [end:predict]


# --8<-- [start:report]
failed = []
if rank == 0:
    print(f"{p} processes; peak: the activations a rank holds at its peak")
for name, Schedule, style in [
        ("1F1B", Schedule1F1B, "one"),
        ("interleaved 1F1B", ScheduleInterleaved1F1B, "loop"),
        ("interleaved zero bubble", ScheduleInterleavedZeroBubble, "loop"),
        ("ZBV", ScheduleZBVZeroBubble, "V"), ("DualPipeV", ScheduleDualPipeV, "V")]:
    S = p if style == "one" else 2 * p
    mine = {"one": [rank], "loop": [rank, rank + p], "V": [rank, S - 1 - rank]}[style]
    out, k = run(Schedule, mine, S), L // S  # k layers per stage
    for r, (log, peak) in enumerate(out):
        predicted = held(log, k, lambda s: 1 if s else 0)
        if rank == 0:
            print(f"{name}, peak, rank {r}: predicted {predicted:,} B, "
                  f"counted {peak:,} B")
            if "I" in {kind for kind, _ in log}:
                print(f"{name}, rank {r}: peak {held(log, k, lambda s: k):,} B "
                      "had each I freed all its outputs")
        if predicted != peak:
            failed.append(f"{name}, rank {r}")
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
