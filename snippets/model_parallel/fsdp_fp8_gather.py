"""FP8 all-gather in FSDP2: a weight that is a tensor subclass with fsdp_pre_all_gather
and fsdp_post_all_gather sends its shard as float8_e4m3fn, one scale per tensor: 1 byte
an element instead of bf16's 2. Bytes predicted and counted; weights, loss compared."""

import argparse
import os
import sys
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd.grad_mode import _unsafe_preserve_version_counter
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_fp8_gather.py")
n = int(os.environ["WORLD_SIZE"])
if n not in (2, 4, 8):
    sys.exit(f"{n} processes: start 2, 4 or 8 (each weight's rows split evenly)")
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank, mesh = dist.get_rank(), init_device_mesh("cpu", (n,))
if rank == 0:
    print(f"{n} processes, gloo on cpu; param_dtype=bfloat16")


# --8<-- [start:subclass]
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448


class Float8Gather(torch.Tensor):  # a weight whose shard travels as float8
    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, data.stride(), dtype=data.dtype, device=data.device,
            requires_grad=data.requires_grad)

    def __init__(self, data):
        self._data = data  # the fp32 values (FSDP shards, pads and copies this)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args, kwargs = tree_map_only(cls, lambda t: t._data, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, cls, func(*args, **kwargs))

    def fsdp_pre_all_gather(self, mesh):  # FSDP calls it with this rank's shard
        amax = self._data.abs().max().float()  # every rank decodes every shard with
        dist.all_reduce(amax, dist.ReduceOp.MAX, group=mesh.get_group())  # its scale:
        scale = FP8_MAX / amax  # one scale per tensor, the same on every rank
        fp8 = (self._data * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        # gloo refuses float8 dtypes: send the same bytes as uint8, one per element
        return (fp8.view(torch.uint8),), scale  # the scale stays here, as metadata

    def fsdp_post_all_gather(self, outputs, scale, param_dtype, *, out=None):
        (gathered,) = outputs  # every rank's bytes: the whole weight
        # torchao keeps these bytes and the scale for torch._scaled_mm (GPUs);
        # here the Linear computes in bf16 with the weight they encode
        weight = (gathered.view(torch.float8_e4m3fn).float() / scale).to(param_dtype)
        if out is not None:  # a later all-gather: FSDP refills the first one's tensor
            with _unsafe_preserve_version_counter(out):  # (autograd saved it)
                out.copy_(weight)
            return None
        return weight, (gathered, weight)  # the tensor to compute with; what to free
# --8<-- [end:subclass]


OPS = {torch.ops.c10d._allgather_base_: "all-gather",  # as in fsdp_reduce_dtype.py
       torch.ops.c10d.allreduce_: "all-reduce"}


class Collectives(TorchDispatchMode):  # sees every op run while it is active
    def __init__(self):
        super().__init__()
        self.bytes, self.dtypes = Counter(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (op := OPS.get(func.overloadpacket)) == "all-gather":  # output, input, ...
            out, inp = args[0], args[1]  # the other ranks' part of the buffer:
            self.bytes[op] += (out.numel() - inp.numel()) * out.element_size()
            self.dtypes[op] = str(out.dtype).removeprefix("torch.")
        elif op == "all-reduce":  # args: [tensors], ...: the tensors reduced
            self.bytes[op] += sum(t.numel() * t.element_size() for t in args[0])
        return func(*args, **(kwargs or {}))


# --8<-- [start:run]
def step(fp8):  # forward and backward, an SGD step, then the loss again
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64, bias=False), nn.ReLU(),
                          nn.Linear(64, 64, bias=False), nn.ReLU(),
                          nn.Linear(64, 8, bias=False))
    linears = model[::2]
    if fp8:  # what torchao's convert_to_float8_training does to each weight
        for layer in linears:
            layer.weight = nn.Parameter(Float8Gather(layer.weight.detach()))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for layer in linears[:2]:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    weights, x, y = [], torch.randn(4, 16), torch.randn(4, 8)
    hooks = [layer.register_forward_pre_hook(  # the gathered weight each Linear uses
        lambda m, _: weights.append(m.weight.detach().float())) for layer in linears]
    with Collectives() as seen:
        nn.functional.mse_loss(model(x), y).backward()
    for hook in hooks:
        hook.remove()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    with torch.no_grad():
        return seen, weights, nn.functional.mse_loss(model(x), y).item()


elements = [64 * 16, 64 * 64, 8 * 64]  # the weights; the last one is the root's
gathered = sum(elements) + sum(elements[:-1])  # the root stays gathered for backward
failed, runs = [], {}
for name, fp8 in (("bf16", False), ("fp8", True)):
    seen, _, _ = runs[name] = step(fp8)
    lines = [(f"all-gather per step, {name} (in {seen.dtypes.get('all-gather')})",
              "all-gather", gathered * (1 if fp8 else 2) * (n - 1) // n)]
    if fp8:  # a float32 amax for each weight, each time it is gathered
        lines.append(("amax all-reduce per step, fp8", "all-reduce",
                      4 * (len(elements) + len(elements) - 1)))
    for what, op, predicted in lines:
        if rank == 0:
            print(f"{what}: predicted {predicted:,} B, counted {seen.bytes[op]:,} B")
        if predicted != seen.bytes[op]:
            failed.append(what)
(_, w16, loss16), (_, w8, loss8) = runs["bf16"], runs["fp8"]
err = max((a - b).abs().max().item() / b.abs().max().item() for a, b in zip(w8, w16))
rel = abs(loss8 - loss16) / loss16
if rank == 0:
    print(f"gathered weights, max |fp8 - bf16| / max |bf16|: {err:.4f} "
          "(< 0.0625: e4m3's 2^-4)")
    print(f"loss after one step, |fp8 - bf16| / bf16: {rel:.4f} "
          "(< 0.0625: the weights' bound)")
if err >= 2**-4:
    failed.append(f"fp8 weights differ from bf16 by {err:.3f} of their largest")
if rel >= 2**-4:
    failed.append(f"the loss after one step differs from bf16's by {rel:.3f}")
# --8<-- [end:run]
dist.destroy_process_group()
if failed:
    sys.exit(f"rank {rank}: {'; '.join(failed)}")
