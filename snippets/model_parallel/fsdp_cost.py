"""What an FSDP2 step costs: collectives, bytes and memory, predicted and counted."""

import argparse
import math
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
from torch.utils._python_dispatch import TorchDispatchMode

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_cost.py")
if int(os.environ["WORLD_SIZE"]) == 1:
    sys.exit("one process shards nothing: start 2 or more")
gpus = torch.cuda.device_count()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % gpus) if gpus else "cpu"
if gpus:
    torch.cuda.set_device(device)
# The device rule (ddp/hello.py): NCCL only if no two processes got one GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, n = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(n)]))
backend = "nccl" if b"cpu" not in devices and len(devices) == n else "gloo"
if backend == "gloo":  # gloo fails on CUDA tensors in FSDP2's collectives: the CPU
    device = torch.device("cpu")
dist.init_process_group(backend, store=store, rank=rank, world_size=n, timeout=timeout)
mesh = init_device_mesh(device.type, (n,))  # name the device (fsdp.py, offload)
if rank == 0:
    print(f"{n} processes, {backend} on {device.type}; "
          "reshard=X below: reshard_after_forward=X")

# --8<-- [start:count]
def nbytes(t):
    return t.numel() * t.element_size()


# FSDP2's dist.all_gather_single and dist.reduce_scatter_single reach these c10d ops
OPS = {torch.ops.c10d._allgather_base_: "all-gathers",
       torch.ops.c10d._reduce_scatter_base_: "reduce-scatters"}


class Collectives(TorchDispatchMode):  # sees every op run while it is active
    def __init__(self):
        super().__init__()
        self.calls, self.bytes = Counter(), Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if op := OPS.get(func.overloadpacket):  # args: output, input, group, ...
            self.calls[op] += 1  # and the bytes of the other ranks' part of the buffer:
            self.bytes[op] += abs(nbytes(args[0]) - nbytes(args[1]))
        return func(*args, **(kwargs or {}))
# --8<-- [end:count]


# --8<-- [start:model]
def make_model(reshard):
    torch.manual_seed(0)  # 65 rows: no multiple of 2, 3, 4 or 8 processes, so FSDP pads
    model = nn.Sequential(nn.Linear(16, 65), nn.ReLU(), nn.Linear(65, 65), nn.ReLU(),
                          nn.Linear(65, 65), nn.ReLU(), nn.Linear(65, 3)).to(device)
    units = [[*m.parameters()] for m in model[:6:2]] + [[*model[6].parameters()]]
    for layer in model[:6:2]:  # each hidden layer a unit, then the root (the head)
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model, [sum(rows(p) * math.prod(p.shape[1:]) for p in u) for u in units]


def rows(p, r=None):  # dim 0 split as torch.chunk splits it: ceil(rows / n) each
    c = -(-p.shape[0] // n)
    return c if r is None else max(0, min(c, p.shape[0] - r * c))  # rank r's rows


failed = []


def report(what, predicted, counted, unit):
    if rank == 0:
        print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)
# --8<-- [end:model]


# --8<-- [start:steps]
def storage_bytes(tensors):  # each storage once: FSDP pads it, a unit's grads share one
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in local}.values())


# True: reshard after forward, re-gather in backward; False: keep; k: keep 1/k of it,
divisors = [k for k in range(2, n) if n % k == 0]  # k a divisor of n but 1 and n
for reshard in [True, False] + divisors[-1:]:
    model, shard = make_model(reshard)  # shard: elements of one rank's padded shards
    full = [n * s * 4 for s in shard]  # bytes of each gathered unit, padded, float32
    group = n if reshard is True else 1 if reshard is False else reshard  # after fwd,
    # the ranks that share each unit's parameters: all, none, or k
    again = len(full) if group > 1 else 0  # all-gathers in backward, within the group
    with Collectives() as fwd:
        out = model(torch.randn(8, 16, device=device))
    held = storage_bytes(model.parameters())
    with Collectives() as bwd:
        out.square().mean().backward()
    for what, predicted, counted, unit in [
        ("forward all-gathers", len(full), fwd.calls["all-gathers"], "calls"),
        ("forward, bytes received", sum(full) * (n - 1) // n,
         fwd.bytes["all-gathers"], "B"),
        ("params held after forward", sum(full) // group, held, "B"),
        ("backward all-gathers", again, bwd.calls["all-gathers"], "calls"),
        ("backward, bytes received", again and sum(full) * (group - 1) // group,
         bwd.bytes["all-gathers"], "B"),
        ("reduce-scatters", len(full), bwd.calls["reduce-scatters"], "calls"),
        ("reduce-scatter, bytes sent", sum(full) * (n - 1) // n,
         bwd.bytes["reduce-scatters"], "B")]:
        report(f"reshard={reshard}, {what}", predicted, counted, unit)
# --8<-- [end:steps]

# --8<-- [start:memory]
params = list(model.parameters())  # the last model, after its backward
report("parameters per rank (padded shards)", sum(shard) * 4,
       storage_bytes(params), "B")
report("gradients per rank (padded shards)", sum(shard) * 4,
       storage_bytes(p.grad for p in params), "B")
adam = torch.optim.Adam(params, lr=1e-3)
adam.step()  # creates its state, shaped like each parameter's to_local()
moments = [None] * n  # each rank's, gathered to print them all
dist.all_gather_object(moments, sum(nbytes(s[k].to_local()) for s in adam.state.values()
                                    for k in ("exp_avg", "exp_avg_sq")))
for r in range(n):
    report(f"Adam moments (exp_avg, exp_avg_sq), rank {r}",
           2 * 4 * sum(rows(p, r) * math.prod(p.shape[1:]) for p in params),
           moments[r], "B")
report("Adam step counters per rank (a float32 per tensor)", len(params) * 4,
       sum(nbytes(s["step"]) for s in adam.state.values()), "B")
# --8<-- [end:memory]

dist.destroy_process_group()
if failed:
    sys.exit(f"rank {rank}: predicted != counted: {', '.join(failed)}")
