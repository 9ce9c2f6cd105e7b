"""FSDP2's resharding: reshard_after_forward (True, False, an int) and, in gradient
accumulation, set_requires_gradient_sync and set_reshard_after_backward. Collectives
and bytes predicted and counted; every step checked against one process."""

import argparse
import os
import sys
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=4 snippets/production/fsdp_reshard.py")
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
# The device rule (ddp/hello.py): NCCL only if no two processes got one GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
backend = "nccl" if b"cpu" not in devices and len(devices) == world else "gloo"
if backend == "gloo":  # gloo fails on CUDA tensors in FSDP2's collectives: the CPU
    device = torch.device("cpu")
else:
    torch.cuda.set_device(device)
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        device_id=device if backend == "nccl" else None,
                        timeout=timeout)
mesh = init_device_mesh(device.type, (world,))  # FSDP2's default: a CUDA mesh wherever
show = print if rank == 0 else (lambda *a: None)  # a GPU is visible, even under gloo
show(f"{world} processes: {backend} on {device.type}")

# --8<-- [start:count]
# FSDP2 calls two functions of torch.distributed by name: the *_single ones in
# torch 2.13; torch 2.11 calls all_gather_into_tensor and reduce_scatter_tensor
# (same arguments)
comm = Counter()
AG, RS = "all_gather_single", "reduce_scatter_single"
if not hasattr(dist, AG):
    AG, RS = "all_gather_into_tensor", "reduce_scatter_tensor"
all_gather, reduce_scatter = getattr(dist, AG), getattr(dist, RS)


def counted_all_gather(output_tensor, input_tensor, group=None, **kwargs):
    comm[f"all-gathers over {dist.get_world_size(group)}"] += 1
    size = output_tensor.element_size()
    comm["received"] += (output_tensor.numel() - input_tensor.numel()) * size
    return all_gather(output_tensor, input_tensor, group=group, **kwargs)


def counted_reduce_scatter(output, input, group=None, **kwargs):
    comm["reduce-scatters"] += 1
    return reduce_scatter(output=output, input=input, group=group, **kwargs)


setattr(dist, AG, counted_all_gather)
setattr(dist, RS, counted_reduce_scatter)
# --8<-- [end:count]

W, MICRO_BATCH = 64, 8  # width; samples per process and micro-batch
divisors = [d for d in range(2, world) if world % d == 0]


def build(reshard_after_forward):
    torch.manual_seed(0)  # the same full weights on every process and in the reference
    model, reference = (nn.Sequential(*[nn.Sequential(nn.Linear(W, W), nn.Tanh())
                                        for _ in range(4)], nn.Linear(W, 4))
                        for _ in range(2))
    reference.load_state_dict(model.state_dict())
    for block in model[:4]:  # 5 units: 4 blocks, and the root with the head
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model.to(device), reference.to(device)


def batch(i):
    g, n = torch.Generator().manual_seed(i), MICRO_BATCH * world  # the whole batch
    return (torch.randn(n, W, generator=g).to(device),
            torch.randn(n, 4, generator=g).to(device))


# --8<-- [start:step]
def train_step(model, micro, keep_unsharded):
    """One optimizer step of `micro` micro-batches; the bytes held after the first."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(micro):
        last = i == micro - 1
        model.set_requires_gradient_sync(last)  # reduce-scatter once, at the end
        if keep_unsharded:  # no resharding after backward: no all-gather in forward
            model.set_reshard_after_backward(last)
        x, y = batch(i)
        loss = nn.functional.mse_loss(model(x[rank::world]), y[rank::world])
        (loss / micro).backward()
        if i == 0:  # parameter bytes this process holds now (DTensor: its shard)
            between = sum((p.to_local() if isinstance(p, DTensor) else p).numel() * 4
                          for p in model.parameters())
    opt.step()
    return between
# --8<-- [end:step]


# --8<-- [start:predict]
def predict(raf, micro, keep, model):
    """All-gathers by group, bytes they bring in, bytes held between micro-batches."""
    rows = [(p.shape[0], p.numel() // p.shape[0]) for p in model.parameters()]
    per = [-(-r // world) for r, _ in rows]  # rows per shard: FSDP2 pads dim 0
    full = sum(k * world * c * 4 for k, (_, c) in zip(per, rows))  # all, padded
    root = full - sum(k * world * c * 4 for k, (_, c) in zip(per[:-2], rows[:-2]))
    group = raf if type(raf) is int else world  # backward's all-gathers: group size
    again = 0 if raf is False else full if type(raf) is int else full - root
    forwards = 1 if keep else micro  # kept unsharded after backward 1: gathered once
    calls = Counter({world: 5 * forwards})  # every unit in a forward
    calls[group] += (5 if type(raf) is int else 4) * micro * (raf is not False)
    got = forwards * (full - full // world) + micro * (again - again // group)
    mine = sum(max(0, min(k, r - rank * k)) * c * 4 for k, (r, c) in zip(per, rows))
    return calls, got, sum(r * c * 4 for r, c in rows) if keep else mine
# --8<-- [end:predict]


def report(what, predicted, counted, unit):
    show(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    failed.extend([what] if predicted != counted else [])


CASES = [(None, 1, False), (False, 1, False)] + [(d, 1, False) for d in divisors[:1]]
CASES += [(None, 2, False), (None, 2, True), (False, 2, True)]
if not divisors:
    show(f"reshard_after_forward as an int: {world} has no divisor but 1 and itself")
failed, worst = [], 0.0
for case, (raf, micro, keep) in enumerate(CASES, 1):
    model, reference = build(raf)
    comm.clear()
    between = train_step(model, micro, keep)
    calls, got, held = predict(raf, micro, keep, reference)
    last = ",\n  set_reshard_after_backward(last)" if keep else ""
    show(f"case {case}: reshard_after_forward={raf}, {micro} micro-batch(es){last}")
    for size in sorted(calls, reverse=True):
        report(f"case {case}, all-gathers over {size}", calls[size],
               comm[f"all-gathers over {size}"], "calls")
    report(f"case {case}, bytes all-gathers bring in", got, comm["received"], "B")
    report(f"case {case}, reduce-scatters", 5, comm["reduce-scatters"], "calls")
    if micro > 1:
        report(f"case {case}, weights held between micro-batches", held, between, "B")
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)  # one process, whole batch
    for i in range(micro):
        x, y = batch(i)
        (nn.functional.mse_loss(reference(x), y) / micro).backward()
    opt.step()
    worst = max([worst] + [(p.full_tensor() - q).abs().max().item()
                           for p, q in zip(model.parameters(), reference.parameters())])
show(f"weights after each step, max abs diff from one process: {worst:.1e}\n  "
     + ("(< 1e-5: equal up to float32 round-off)" if worst < 1e-5 else
        "(>= 1e-5: more than float32 round-off)"))
dist.destroy_process_group()
if failed or worst >= 1e-5:
    sys.exit(f"predicted != counted, or not one process's weights: {', '.join(failed)}")
