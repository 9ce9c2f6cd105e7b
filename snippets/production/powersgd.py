"""PowerSGD, DDP's low-rank communication hook, of rank 1 and 2, with and without error
feedback: the bytes it hands to dist.all_reduce and the state it keeps, predicted and
counted, and the error of the gradients it delivers, against the exact average."""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/powersgd.py")
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world_size)]))
own = b"cpu" not in devices and len(devices) == world_size
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                        timeout=timeout)
# PowerSGD's callbacks hold the group, and gloo's threads free them just after each
# step: held here to the end, the group is never freed by a gloo thread (it would join
# itself and abort: "Resource deadlock avoided")
world = dist.group.WORLD
show = print if rank == 0 else (lambda *a: None)
show(f"{world_size} processes on "
     f"{'the CPU' if b'cpu' in devices else f'{len(devices)} GPU(s)'}: {backend}")

# --8<-- [start:count]
sent, all_reduce = [0], dist.all_reduce  # bytes handed to all_reduce in this step


def counted_all_reduce(tensor, *args, **kwargs):  # the hooks call dist.all_reduce
    sent[0] += tensor.numel() * tensor.element_size()
    return all_reduce(tensor, *args, **kwargs)


dist.all_reduce = counted_all_reduce
# --8<-- [end:count]


# --8<-- [start:hooks]
def powersgd(r, feedback=True):  # compress from step 3 (steps 1-2: see below)
    return powerSGD_hook.PowerSGDState(process_group=None, start_powerSGD_iter=2,
                                       matrix_approximation_rank=r,
                                       use_error_feedback=feedback)


HOOKS = {  # name: (hook, a function making its state)
    "allreduce_hook (no compression)": (default_hooks.allreduce_hook, lambda: None),
    "powerSGD_hook r=1": (powerSGD_hook.powerSGD_hook, lambda: powersgd(1)),
    "powerSGD_hook r=2": (powerSGD_hook.powerSGD_hook, lambda: powersgd(2)),
    "powerSGD_hook r=1, no error feedback": (
        powerSGD_hook.powerSGD_hook, lambda: powersgd(1, feedback=False))}
# --8<-- [end:hooks]

STEPS = 2 + 40  # 2 plain steps, 40 compressed; no optimizer: the same weights for all
torch.manual_seed(0)
teacher = nn.Linear(256, 10).to(device)  # targets a model can learn


def train(hook, state):
    """Gradients of step 3, their sum over steps 3 to STEPS, the bytes of step 3."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512),
                          nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=100)  # one bucket: why, see the page
    ddp.register_comm_hook(state, hook)
    gen = torch.Generator().manual_seed(1)
    total = [torch.zeros_like(p) for p in model.parameters()]
    for step in range(1, STEPS + 1):
        x = torch.randn(32 * world_size, 256, generator=gen).to(device)
        y = teacher(x).detach()
        sent[0] = 0
        ddp.zero_grad()
        mine = slice(rank * 32, (rank + 1) * 32)
        nn.functional.mse_loss(ddp(x[mine]), y[mine]).backward()
        if step == 3:
            first, step3_bytes = [p.grad.clone() for p in model.parameters()], sent[0]
        if step >= 3:
            total = [t + p.grad for t, p in zip(total, model.parameters())]
    return first, total, step3_bytes, list(model.parameters())


def rel_error(got, exact):
    return (sum(((g - e) ** 2).sum() for g, e in zip(got, exact)).sqrt()
            / sum((e ** 2).sum() for e in exact).sqrt()).item()


# --8<-- [start:predict]
def predicted_bytes(name, params):
    """Bytes handed to all_reduce per step; of them, PowerSGD's P and Q."""
    if not name.startswith("powerSGD"):
        return sum(p.numel() * 4 for p in params), 0
    r, low_rank, full = int(name.split("r=")[1][0]), 0, 0
    for p in params:  # PowerSGD's rule: a matrix n x m goes as P (n x r) and Q (m x r)
        n, m = p.shape[0], p.numel() // p.shape[0]  # if that is < half its size
        r_ = min(n, m, r)
        if (n + m) * r_ * 2 < n * m:  # float32, 4 bytes, like the bucket
            low_rank += (n + m) * r_ * 4
        else:
            full += p.numel() * 4
    return low_rank + full, low_rank
# --8<-- [end:predict]


# --8<-- [start:report]
failed, exact = [], None
show("bytes each hook passes to dist.all_reduce in step 3:")
for name, (hook, make_state) in HOOKS.items():
    first, total, nbytes, params = train(hook, state := make_state())
    exact = exact or (first, total)  # the first hook: the exact average
    predicted, low_rank = predicted_bytes(name, params)
    show(f"{name}: predicted {predicted:,} B, "
         f"counted {nbytes:,} B")
    failed += [] if predicted == nbytes else [f"{name} (bytes)"]
    if state is None:  # the reference
        continue
    kept = sum(t.numel() * t.element_size() for d in (  # per bucket: error, P and Q
        state.error_dict, state.p_memory_dict, state.q_memory_dict) for t in d.values())
    error = sum(p.numel() * 4 for p in params) if state.use_error_feedback else 0
    tag = name[14:].replace("error ", "")  # r=1, r=2, r=1, no feedback
    show(f"{tag}: state kept between steps: predicted {error + low_rank:,} B, "
         f"counted {kept:,} B")
    failed += [] if kept == error + low_rank else [f"{name} (state)"]
    err, err_sum = rel_error(first, exact[0]), rel_error(total, exact[1])
    show(f"{tag}: error of the step-3 gradient: {err:.2f}\n  "
         + ("(< 1: a projection, not round-off)" if err < 1 else
            "(>= 1: worse than sending nothing)"))
    bound, why = (0.5, "error feedback sends the rest later") if error else (
        1, "what a step leaves out is lost")
    show(f"{tag}: error of the sum of {STEPS - 2} steps' gradients: {err_sum:.2f}\n  "
         + (f"(< {bound:g}: {why})" if err_sum < bound else
            f"(>= {bound:g}: above it)"))
    failed += [] if err < 1 and err_sum < bound else [f"{name} (error)"]
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted or a bound not met: {', '.join(failed)}")
