"""What a transformer block costs under tensor and sequence parallelism: collectives,
their bytes, parameter bytes and FLOPs per rank, each predicted by a formula and
counted in the run; output and gradients checked against one process."""

import argparse
import copy
import os
import sys
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)
from torch.utils.flop_counter import flop_registry

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/tensor_cost.py")
if 12 % int(os.environ["WORLD_SIZE"]):  # 12 heads and 12 positions, in equal shards
    sys.exit(f"run with 1, 2, 3, 4, 6 or 12 processes (12 heads, 12 positions), not "
             f"{os.environ['WORLD_SIZE']}" if os.environ["RANK"] == "0" else 2)
# The device rule (ddp/hello.py): NCCL only if no two processes share a GPU, by UUID;
# otherwise gloo, on the CPU (DTensor's collectives over gloo fail on CUDA tensors)
gpus, timeout = torch.cuda.device_count(), timedelta(seconds=60)
gpu = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % gpus) if gpus else None
if gpus:
    torch.cuda.set_device(gpu)  # before any other CUDA work
store, rank, n = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(gpu).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(n)]))
own = b"cpu" not in devices and len(devices) == n  # a GPU of its own each
device, backend = (gpu, "nccl") if own else (torch.device("cpu"), "gloo")
dist.init_process_group(backend, store=store, rank=rank, world_size=n, timeout=timeout)
if rank == 0:
    print(f"{n} processes, {gpus} GPU(s) here: {backend} on {device.type}")
mesh = init_device_mesh(device.type, (n,), mesh_dim_names=("tp",))

# --8<-- [start:model]
B, S, D, HEADS, FF = 2, 12, 48, 12, 192  # batch, sequence, features, heads, MLP


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x):  # -1: as many heads as this rank holds
        q, k, v = (m(x).unflatten(-1, (-1, D // HEADS)).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        a = torch.softmax(q @ k.transpose(2, 3) / (D // HEADS) ** 0.5, dim=-1)
        return self.o((a @ v).transpose(1, 2).flatten(2))


class Block(nn.Module):  # pre-norm: x + attn(norm1(x)), then + mlp(norm2(x))
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention()
        self.mlp = nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def plan(sp, gather=True):  # sp: sequence parallelism too; mlp.0 and mlp.2: Linears
    out = Shard(1) if sp else Replicate()  # of the row-wise layers: reduce-scatter
    p = {"attn.o": RowwiseParallel(output_layouts=out), "mlp.0": ColwiseParallel(),
         "mlp.2": RowwiseParallel(output_layouts=out),
         **{f"attn.{m}": ColwiseParallel() for m in "qkv"}}
    for m in ("attn", "mlp") if gather else ():  # one input for all the layers inside
        p[m] = PrepareModuleInput(input_layouts=out, desired_input_layouts=Replicate())
    return p | ({m: SequenceParallel() for m in ("norm1", "norm2")} if sp else {})
# --8<-- [end:model]


# --8<-- [start:count]
def nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


class Counted(CommDebugMode):
    """CommDebugMode counts the collectives; this adds the bytes of each one's whole
    buffer, and the FLOPs of matmuls by FlopCounterMode's formulas (flop_registry)."""

    def __init__(self):
        super().__init__()
        self.bytes, self.flops = Counter(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is NotImplemented or types:  # a DTensor op (it comes back as the op on
            return out  # local tensors), or DTensor's shape inference on FakeTensors
        if func.namespace == "_c10d_functional" and func._opname != "wait_tensor":
            # the input of an all-reduce or reduce-scatter, the output of an all-gather
            self.bytes[func._opname] += max(nbytes(args[0]), nbytes(out))
        if func._overloadpacket in flop_registry:  # what this rank computes
            self.flops += flop_registry[func._overloadpacket](*args, **kwargs or {},
                                                               out_val=out)
        return out
# --8<-- [end:count]


# --8<-- [start:predict]
act = B * S * D * 4  # bytes of one float32 activation (batch, sequence, features)
W = 4 * D * D + 2 * D * FF  # weights of the six Linears
sharded = W + 3 * D + FF  # with the biases of q, k, v and mlp.0, split by rows
replicated = 2 * D + 4 * D  # biases of o and mlp.2, the two LayerNorms
flops = (6 * B * S * W + 12 * B * S * S * D) // n  # see the page
AR, AG, RS = "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"
on = n > 1  # on a mesh of one rank, DTensor needs no collective
runs = {  # name: plan, collectives per block predicted in forward, in backward
    "TP": (plan(sp=False), {AR: 2 * on}, {AR: 2 * on}),
    "TP + SP": (plan(sp=True), {AG: 2 * on, RS: 2 * on}, {AG: 2 * on, RS: 2 * on}),
    "TP, no prep": (plan(False, False), {AR: 2 * on}, {AR: 4 * on}),  # printed below
}
failed = []


def report(what, predicted, counted, unit):
    if rank == 0:
        print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)
# --8<-- [end:predict]


# --8<-- [start:run]
torch.manual_seed(0)
ref = Block().to(device)  # one process's block, the same on every rank
x = torch.randn(B, S, D, device=device)  # the same batch on every rank
x_ref = x.clone().requires_grad_()
ref(x_ref).square().sum().backward()
ref_out = ref(x).detach()
if rank == 0:
    print("TP, no prep: TP without PrepareModuleInput on attn")
for name, (layout, *predicted) in runs.items():
    model, sp = parallelize_module(copy.deepcopy(ref), mesh, layout), "norm1" in layout
    x_in = (x.chunk(n, dim=1)[rank] if sp else x).clone().requires_grad_()
    with Counted() as fwd:
        out = model(x_in)  # SP: each rank gives and gets its S/n positions
    with Counted() as bwd:
        out.square().sum().backward()
    for d, mode, pred in zip(("forward", "backward"), (fwd, bwd), predicted):
        counted = {str(op).split(".")[1]: c for op, c in mode.get_comm_counts().items()}
        for op in sorted(pred.keys() | counted.keys()):
            short = op.removesuffix("_tensor").replace("_into", "")  # all_gather, ...
            what = f"{name}, {d}, {short}"
            report(what, pred.get(op, 0), counted.get(op, 0), "calls")
            report(f"{what} bytes", pred.get(op, 0) * act, mode.bytes[op], "B")
    local = (p.to_local() if isinstance(p, DTensor) else p for p in model.parameters())
    report(f"{name}, parameters per rank", 4 * (sharded // n + replicated),
           nbytes(*local), "B")
    report(f"{name}, FLOPs per rank", flops, fwd.flops + bwd.flops, "FLOP")
    got = [out, x_in.grad, *(p.grad.full_tensor() if isinstance(p, DTensor) else p.grad
                             for p in model.parameters())]  # gradients gathered whole
    want = [t.chunk(n, dim=1)[rank] if sp else t for t in (ref_out, x_ref.grad)]
    want += [q.grad for q in ref.parameters()]  # SP: this rank's positions
    diff = max((a - b).abs().max() for a, b in zip(got, want))
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    if rank == 0:  # the verdict says what the figure shows
        verdict = "< 1e-5: float32 round-off" if diff < 1e-5 else ">= 1e-5: NOT equal"
        print(f"{name}, max abs diff from one process (output, gradients): "
              f"{diff.item():.1e}\n  ({verdict})")
    assert diff < 1e-5, f"{name} differs from one process"
if rank == 0:
    print(f"ring bytes sent per rank and block: TP 4 * 2(n-1)/n * {act:,} B,\n  SP 8 * "
          f"(n-1)/n * {act:,} B, both {8 * (n - 1) * act // n:,} B (formula only)")
# --8<-- [end:run]

dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
