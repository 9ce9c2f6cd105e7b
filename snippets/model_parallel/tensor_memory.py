"""The activations an attention block keeps for backward, per rank, on one process, with
tensor parallelism and with sequence parallelism too: predicted by a formula from the
shapes, counted by saved-tensor hooks; output and gradients checked against one process.
"""

import argparse
import copy
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/tensor_memory.py")
if 12 % int(os.environ["WORLD_SIZE"]):  # 12 heads and 12 positions, in equal shards
    sys.exit(f"run with 1, 2, 3, 4, 6 or 12 processes (12 heads, 12 positions), not "
             f"{os.environ['WORLD_SIZE']}" if os.environ["RANK"] == "0" else 2)
# The device rule of snippets/ddp/cost.py: NCCL only if no two processes share a GPU,
# by UUID; otherwise gloo, on the CPU (DTensor's collectives over gloo fail on CUDA)
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
B, S, D, HEADS = 2, 12, 48, 12  # batch, sequence, features, heads (of D / HEADS)


class Attention(nn.Module):  # softmax(q kᵀ / √d) v, the scores explicit: kept
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, h):  # -1: as many heads as this rank holds
        q, k, v = (m(h).unflatten(-1, (-1, D // HEADS)).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        w = torch.softmax(q @ k.transpose(2, 3) / (D // HEADS) ** 0.5, dim=-1)
        return self.o((w @ v).transpose(1, 2).flatten(2))


class Block(nn.Module):  # pre-norm, no dropout: x + attn(norm(x))
    def __init__(self):
        super().__init__()
        self.norm, self.attn = nn.LayerNorm(D), Attention()

    def forward(self, x):
        return x + self.attn(self.norm(x))


def plan(sp):  # tensor parallelism; sp: the norm on a shard of the sequence too
    out = Shard(1) if sp else Replicate()
    return {"attn": PrepareModuleInput(input_layouts=out,  # one input for q, k, v
                                       desired_input_layouts=Replicate()),
            **{f"attn.{m}": ColwiseParallel() for m in "qkv"},  # heads split
            "attn.o": RowwiseParallel(output_layouts=out)
            } | ({"norm": SequenceParallel()} if sp else {})
# --8<-- [end:model]


# --8<-- [start:count]
def storage(t):  # a DTensor's bytes are its local tensor's
    return (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()


def kept_for_backward(model, x, grad):
    """Forward and backward of the leaf x; the bytes autograd keeps for backward, by
    the module that saved them: each storage once (views share one), no parameters."""
    params = {storage(p).data_ptr() for p in model.parameters()}
    names = {m: name or "block" for name, m in model.named_modules()}
    kept, running = {}, []  # running: the modules whose forward runs, innermost last
    hooks = [h for m in names for h in (  # "and None": the hook leaves the output be
        m.register_forward_pre_hook(lambda m, args: running.append(names[m])),
        m.register_forward_hook(lambda m, args, out: running.pop() and None))]

    def pack(t):  # called for every tensor autograd saves, while forward runs
        s = storage(t)
        if s.data_ptr() not in params:  # the whole storage, once, where first saved
            kept.setdefault(s.data_ptr(), (running[-1], s.nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    out.backward(grad)  # a given gradient: no loss that keeps tensors of its own
    for h in hooks:
        h.remove()
    return out, {m: sum(b for k, b in kept.values() if k == m) for m in names.values()}
# --8<-- [end:count]


# --8<-- [start:predict]
PARTS = {"norm": "norm's input, mean, 1/std", "attn.q": "input of q, k, v",
         "attn": "q, k, v by head, softmax", "attn.o": "input of o"}


def predicted(tp, sp):  # float32 values (4 bytes) kept per rank; tp, sp: divisors
    return {"norm": 4 * (B * S * D + 2 * B * S) // sp,  # SP: its positions only
            "attn.q": 4 * B * S * D,  # one tensor for the three (SP: gathered, whole)
            "attn": 4 * (3 * B * S * D + B * HEADS * S * S) // tp,  # copies per head
            "attn.o": 4 * B * S * D // tp}  # the weighted sums of this rank's heads
# --8<-- [end:predict]


# --8<-- [start:run]
failed = []


def report(what, predicted, counted, unit):
    if rank == 0:
        print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


torch.manual_seed(0)
ref = Block().to(device)  # one process's block, the same on every rank
x, g = torch.randn(2, B, S, D, device=device)  # the input; a gradient for the output
if rank == 0:
    print("bytes kept for backward per rank, part by part, then in all:")
for name, sp in (("one process", None), ("TP", False), ("TP + SP", True)):
    model = ref if sp is None else parallelize_module(copy.deepcopy(ref), mesh,
                                                      plan(sp))
    mine = (lambda t: t.chunk(n, dim=1)[rank]) if sp else (lambda t: t)  # positions
    x_in = mine(x).clone().requires_grad_()  # it needs a gradient, as in a stack
    out, counted = kept_for_backward(model, x_in, mine(g))
    pred = predicted(1 if sp is None else n, n if sp else 1)  # divisors: TP, SP
    for m, label in PARTS.items():
        report(f"{name}, {label}", pred[m], counted[m], "B")
    report(f"{name}, in all",  # the attention's activations, all parts
           sum(pred.values()), sum(counted.values()), "B")
    if sp is None:  # the reference for the two others
        ref_out, ref_grad = out.detach(), x_in.grad
        continue
    got = [out, x_in.grad, *(p.grad.full_tensor() if isinstance(p, DTensor) else p.grad
                             for p in model.parameters())]  # gradients gathered whole
    want = [mine(ref_out), mine(ref_grad), *(q.grad for q in ref.parameters())]
    diff = max((a - b).abs().max() for a, b in zip(got, want))
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    if rank == 0:  # the verdict says what the figure shows
        verdict = "< 1e-5: float32 round-off" if diff < 1e-5 else ">= 1e-5: NOT equal"
        print(f"{name}, max abs diff from one process (output, gradients): "
              f"{diff.item():.1e}\n  ({verdict})")
    assert diff < 1e-5, f"{name} differs from one process"
# --8<-- [end:run]

dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
