"""Sequence parallelism and loss_parallel: a pre-norm MLP block whose LayerNorms work
on shards of the sequence, and a cross-entropy on logits sharded by class; loss,
gradients and one optimizer step compared with the same model on one process.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/tensor_sp.py
"""

import argparse
import copy
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/model_parallel/tensor_sp.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if 12 % world:  # 12 positions, 48 hidden features, 48 classes: cut into equal shards
    sys.exit(f"run with 1, 2, 3, 4, 6 or 12 processes (equal shards of a sequence of "
             f"12), not {world}" if rank == 0 else 2)
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")


def show(*args):
    if rank == 0:
        print(*args)


mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("tp",))


# --8<-- [start:model]
B, S, D, H, V = 2, 12, 16, 48, 48  # batch, sequence, features, hidden, classes


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(D, H), nn.Linear(H, D)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """A pre-norm residual MLP, then the final norm and the output projection."""

    def __init__(self):
        super().__init__()
        self.norm, self.mlp = nn.LayerNorm(D), MLP()
        self.out_norm, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, h):  # h: (batch, sequence, features)
        h = h + self.mlp(self.norm(h))
        return self.head(self.out_norm(h))  # logits: (batch, sequence, classes)
# --8<-- [end:model]


# --8<-- [start:plan]
torch.manual_seed(0)
ref = Block().to(device)  # the model on one process, the same on every process
sp = parallelize_module(copy.deepcopy(ref), mesh, {
    # LayerNorm normalises each position alone: each rank does its positions
    "norm": SequenceParallel(),
    # the MLP's input: all-gather the sequence (one gather for all its linears)
    "mlp": PrepareModuleInput(input_layouts=Shard(1),
                              desired_input_layouts=Replicate()),
    "mlp.up": ColwiseParallel(),
    # partial sums reduce-scattered to sequence shards, instead of all-reduced
    "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
    "out_norm": SequenceParallel(),
    # all-gather the sequence; the logits stay a DTensor, split by class
    "head": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),
})
# the same tensor parallelism without sequence parallelism, to compare
tp = parallelize_module(copy.deepcopy(ref), mesh, {
    "mlp.up": ColwiseParallel(),
    "mlp.down": RowwiseParallel(),
    "head": ColwiseParallel(use_local_output=False),
})
# --8<-- [end:plan]


# --8<-- [start:layouts]
def layout(t):
    if isinstance(t, DTensor):
        return (f"{t.placements[0]!r:13} local {tuple(t.to_local().shape)!s:12}"
                f" of {tuple(t.shape)}")
    return f"{'plain tensor':13} local {tuple(t.shape)}"


hooks = []
for name, m in sp.named_modules():
    if name:  # registered after the plan's hooks: they see what the layer sees
        hooks.append(m.register_forward_pre_hook(
            lambda m, a, name=name: show(f"  {name:8} in  {layout(a[0])}")))
        hooks.append(m.register_forward_hook(
            lambda m, a, o, name=name: show(f"  {name:8} out {layout(o)}")))
# the same batch on every rank; each rank takes its slice of the sequence,
# as the block before this one would hand it over
x = torch.randn(B, S, D, device=device)
y = torch.randint(V, (B, S), device=device)
show(f"activations on rank 0 of {world}:")
with loss_parallel():  # cross_entropy on a DTensor (and its backward) inside
    logits = sp(x.chunk(world, dim=1)[rank])
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
show(f"  {'loss':8} out {layout(loss)}")
for h in hooks:
    h.remove()
# --8<-- [end:layouts]


# --8<-- [start:memory]
def step(model, x, comms):
    """Forward, loss and backward of the leaf x; returns the loss and the bytes that
    autograd keeps for backward."""
    def storage(t):
        return (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()

    params = {storage(p).data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t):  # every tensor saved for backward: count each storage once
        s = storage(t)
        if s.data_ptr() not in params:  # weights are not activations
            kept[s.data_ptr()] = s.nbytes()
        return t

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with loss_parallel():  # no effect on plain tensors (ref)
            with CommDebugMode() as fwd:
                out = model(x)
            with CommDebugMode() as lss:
                loss = F.cross_entropy(out.flatten(0, 1), y.flatten())
            with CommDebugMode() as bwd:
                loss.backward()
    comms.update(forward=counts(fwd), loss=counts(lss), backward=counts(bwd))
    return loss, sum(kept.values())


def counts(mode):  # "all_gather 2, reduce_scatter 1"
    return ", ".join(
        f"{str(op).split('.')[-1].removesuffix('_tensor').removesuffix('_into')} {n}"
        for op, n in mode.get_comm_counts().items()) or "-"


comms = {"TP": {}, "TP + SP": {}}
x_ref, x_tp = x.clone().requires_grad_(), x.clone().requires_grad_()
x_sp = x.chunk(world, dim=1)[rank].clone().requires_grad_()  # this rank's positions
ref_loss, ref_bytes = step(ref, x_ref, {})
tp_loss, tp_bytes = step(tp, x_tp, comms["TP"])
sp_loss, sp_bytes = step(sp, x_sp, comms["TP + SP"])
show(f"kept for backward, per rank: one process {ref_bytes} B, TP {tp_bytes} B, "
     f"TP + SP {sp_bytes} B")
show(f"{'collectives':11} {'TP':13} TP + SP")  # one row per phase: fits 80 columns
for phase in ("forward", "loss", "backward"):
    show(f"{phase:11} {comms['TP'][phase]:13} {comms['TP + SP'][phase]}")
# --8<-- [end:memory]

# --8<-- [start:check]
for name, p in sp.named_parameters():
    if p.grad.placements != p.placements:
        show(f"{name:15} param {p.placements[0]!r}, grad {p.grad.placements[0]!r}")


def rel(got, want):  # relative to the reference (some gradients are below 1e-2)
    return (got - want).abs().max() / want.abs().max()


diffs = {
    "loss": rel(sp_loss.full_tensor(), ref_loss),
    "input grad": rel(x_sp.grad, x_ref.grad.chunk(world, dim=1)[rank]),
    "weight grads": max(rel(p.grad.full_tensor(), q.grad)
                        for p, q in zip(sp.parameters(), ref.parameters())),
}
opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (sp, ref))
with CommDebugMode() as upd:
    opt.step()
ref_opt.step()
show(f"optimizer step collectives: {counts(upd)}")
diffs["after one step"] = max(rel(p.full_tensor(), q)
                              for p, q in zip(sp.parameters(), ref.parameters()))
for what, d in diffs.items():
    dist.all_reduce(d, op=dist.ReduceOp.MAX)
    verdict = "< 1e-5: float32 round-off" if d < 1e-5 else ">= 1e-5: NOT equal"
    show(f"max rel diff, {what:14}: {d.item():.1e} ({verdict})")
bad = [what for what, d in diffs.items() if not d < 1e-5]
assert not bad, f"not equal to one process: {', '.join(bad)}"
# --8<-- [end:check]

del sp, tp, logits, loss, sp_loss, tp_loss, opt, ref_opt
gc.collect()
dist.destroy_process_group()
