"""FSDP2's MixedPrecisionPolicy and the bytes of its collectives: param_dtype=bfloat16
all-gathers bf16 parameters; reduce_dtype=float32 reduce-scatters the gradients in
float32, twice the bytes of reduce_dtype=bfloat16. Predicted and counted for both."""

import argparse
import os
import sys
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils._python_dispatch import TorchDispatchMode

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_reduce_dtype.py")
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
mesh = init_device_mesh(device.type, (n,))
if rank == 0:
    print(f"{n} processes, {backend} on {device.type}; param_dtype=bfloat16")

# --8<-- [start:count]
OPS = {torch.ops.c10d._allgather_base_: "all-gather",  # FSDP2's collectives reach
       torch.ops.c10d._reduce_scatter_base_: "reduce-scatter"}  # these c10d ops


class Collectives(TorchDispatchMode):  # sees every op run while it is active
    def __init__(self):
        super().__init__()
        self.bytes, self.dtypes = Counter(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if op := OPS.get(func.overloadpacket):  # args: output, input, group, ...
            out, inp = args[0], args[1]  # the other ranks' part of the buffer:
            self.bytes[op] += abs(out.numel() - inp.numel()) * out.element_size()
            self.dtypes.setdefault(op, set()).add(str(out.dtype).removeprefix("torch."))
        return func(*args, **(kwargs or {}))
# --8<-- [end:count]


# --8<-- [start:run]
def step(reduce_dtype):  # one forward and backward; each Linear a unit, then the root
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 8)).to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
    for layer in model[:4:2]:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    with Collectives() as seen:
        model(torch.randn(4, 16, device=device)).square().mean().backward()
    return seen


def padded(rows, cols):  # a tensor's elements once FSDP pads dim 0 to a multiple of n
    return -(-rows // n) * n * cols


units = [[(64, 16), (64, 1)], [(64, 64), (64, 1)], [(8, 64), (8, 1)]]  # the last: root
sizes = [sum(padded(r, c) for r, c in unit) for unit in units]  # elements of each unit
gathered = sum(sizes) + sum(sizes[:-1])  # forward, backward: the root stays gathered
failed, counts = [], {}  # (reshard_after_forward's default: False for the root)
for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    seen = counts[name] = step(dtype)
    size = torch.finfo(dtype).bits // 8
    for op, elements, width in (("all-gather", gathered, 2),  # param_dtype: bf16
                                ("reduce-scatter", sum(sizes), size)):  # reduce_dtype
        predicted, counted = elements * width * (n - 1) // n, seen.bytes[op]
        what = f"reduce {name}, {op} in {', '.join(sorted(seen.dtypes[op]))}"
        if rank == 0:
            print(f"{what}: predicted {predicted:,} B, counted {counted:,} B")
        if predicted != counted:
            failed.append(what)
if rank == 0:
    print("counted, fp32 reduce / bf16 reduce: " + ", ".join(
        f"{op} {counts['fp32'].bytes[op] / counts['bf16'].bytes[op]:.2f}"
        for op in ("all-gather", "reduce-scatter")))
# --8<-- [end:run]
dist.destroy_process_group()
if failed:
    sys.exit(f"rank {rank}: predicted != counted: {', '.join(failed)}")
