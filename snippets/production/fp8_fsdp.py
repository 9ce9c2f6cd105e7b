"""FSDP2 with torchao's float8 all-gather: the bytes a step gathers in bfloat16 and in
float8, and the all-reduces of the scales, predicted and counted."""

import argparse
import logging
import os
import sys
import warnings
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils._python_dispatch import TorchDispatchMode

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
logging.getLogger("torchao").setLevel(logging.ERROR)  # no CUDA kernels in a CPU build
logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # a deprecation notice
# Float8Linear returns a view, and FSDP2 warns that an in-place op on it would skip
# a hook; no output is modified in place here
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402
from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp  # noqa: E402

if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/fp8_fsdp.py")
n = int(os.environ["WORLD_SIZE"])
if n == 1 or 64 % n:  # FSDP2 pads uneven shards, torchao's float8 weights do not
    sys.exit(f"start 2, 4, 8, 16, 32 or 64 processes, not {n}: one process shards "
             "nothing, and the float8 all-gather needs shards of equal size")
gpus = torch.cuda.device_count()  # float8 products need compute capability >= 8.9:
if gpus and torch.cuda.get_device_capability() < (8, 9):  # older GPUs leave the work
    gpus = 0  # to the CPU
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

# --8<-- [start:count]
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


class Collectives(TorchDispatchMode):  # sees every op run while it is active
    def __init__(self):
        super().__init__()
        self.calls, self.bytes = Counter(), Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = func.overloadpacket.__name__  # _allgather_base_, all_reduce, ...
        self.calls[op] += 1
        if op == "_allgather_base_":  # args: output, input; bytes from other ranks:
            out, inp = args[:2]
            self.bytes[op] += (out.numel() - inp.numel()) * out.element_size()
            if backend == "gloo" and out.dtype in FLOAT8:  # gloo has no float8 type:
                args = (out.view(torch.uint8), inp.view(torch.uint8), *args[2:])
        return func(*args, **(kwargs or {}))  # the same bytes, as uint8
# --8<-- [end:count]


# --8<-- [start:model]
def make(float8_gather):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256, bias=False), nn.GELU(),
                          nn.Linear(256, 256, bias=False), nn.GELU(),
                          nn.Linear(256, 64, bias=False)).to(device, torch.bfloat16)
    convert_to_float8_training(model, config=Float8LinearConfig(
        enable_fsdp_float8_all_gather=float8_gather))
    for layer in model[::2]:  # bfloat16 weights: both runs cast the same bits to float8
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


LAYERS, WEIGHTS = 3, 64 * 256 + 256 * 256 + 256 * 64  # elements, all gathered
failed = []


def report(what, predicted, counted, unit):
    if rank == 0:
        print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)
# --8<-- [end:model]


# --8<-- [start:steps]
runs = {}
for name, float8_gather, precompute, size in [  # size: bytes per gathered weight
        ("bfloat16 all-gather", False, False, 2),
        ("float8 all-gather", True, False, 1),
        ("float8, scales precomputed", True, True, 1)]:
    model = make(float8_gather)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (1, 2):  # step 2 runs on the weights and scales step 1 left
        torch.manual_seed(rank)
        with Collectives() as seen:  # forward and backward
            out = model(torch.randn(32, 64, device=device))
            out.float().square().mean().backward()
        opt.step()
        opt.zero_grad()
        if precompute:  # every weight's scale in one all-reduce, for the next step
            precompute_float8_dynamic_scale_for_fsdp(model)
    # forward and backward each gather every layer (reshard_after_forward=True)
    report(f"{name}, bytes gathered", 2 * WEIGHTS * size  # from other ranks, per step
           * (n - 1) // n, seen.bytes["_allgather_base_"], "B")
    amax = 2 * LAYERS if float8_gather and not precompute else 0  # one per gather
    report(f"{name}, amax all-reduces", amax, seen.calls["all_reduce"],
           "calls")
    runs[name] = out.detach()
ref = runs.pop("bfloat16 all-gather")  # the same float8 matmuls: the same output
diff = max((out - ref).abs().max().item() for out in runs.values())
verdict = "== 0: bit-identical" if diff == 0 else "!= 0: not bit-identical"
if rank == 0:
    print(f"step 2 output, both float8 all-gathers vs bfloat16's: max abs diff "
          f"{diff:.1e}\n  ({verdict})")
dist.destroy_process_group()
if failed or diff != 0:
    sys.exit(f"rank {rank}: predicted != counted, or outputs differ: {failed}")
# --8<-- [end:steps]
