"""What a 2-D (FSDP x TP) step costs: the collectives on each mesh dimension, their
bytes, and each rank's memory, predicted by a formula and counted in the run."""

import argparse
import copy
import gc
import math
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=4 snippets/model_parallel/twod_cost.py")
if (n := int(os.environ["WORLD_SIZE"])) % 2 or n < 4:  # one line, from rank 0
    sys.exit(f"this program builds a (processes/2) x 2 mesh: run it with an even number"
             f" of processes, at least 4, not {n}" if os.environ["RANK"] == "0" else 2)
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before any other CUDA work
# The device rule (ddp/hello.py): NCCL only if no two processes got the same GPU (UUID)
timeout = timedelta(seconds=60)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
own = b"cpu" not in devices and len(devices) == world  # a GPU of its own each
if not own:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device = torch.device("cpu")
dist.init_process_group("nccl" if own else "gloo", store=store, rank=rank,
                        world_size=world, timeout=timeout)
DP, TP = world // 2, 2
mesh = dist.init_device_mesh(device.type, (DP, TP), mesh_dim_names=("dp", "tp"))
dp, tp = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()
if rank == 0:
    print(f"{world} processes, {dist.get_backend()} on {device.type}: {DP} x {TP} mesh")

# --8<-- [start:model]
DIM, HIDDEN, BLOCKS, B = 31, 128, 2, 4  # B: samples per dp rank; DIM odd on purpose


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


torch.manual_seed(0)
ref = nn.Sequential(*[Block() for _ in range(BLOCKS)]).to(device)
model = copy.deepcopy(ref)
for block in model:  # as twod.py: TP on the tp sub-mesh, then FSDP on the dp one
    plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    fully_shard(parallelize_module(block, mesh["tp"], plan), mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
# --8<-- [end:model]

# --8<-- [start:predict]
# (rows, columns) a tp rank holds of up.weight, up.bias, down.weight, down.bias (whole);
# FSDP cuts dim 0 into dp pieces, the last padded to the size of the first
tp_shapes = [(HIDDEN // TP, DIM), (HIDDEN // TP, 1), (DIM, HIDDEN // TP), (DIM, 1)]
shard = sum(math.ceil(rows / DP) * cols for rows, cols in tp_shapes)  # per block
predicted = {("all-reduce", "forward"): BLOCKS,  # the output of each row-wise down
             ("all-reduce", "backward"): BLOCKS - 1,  # up's input grad, not block 0's
             ("all-gather", "forward"): BLOCKS,  # each block's weights
             ("all-gather", "backward"): BLOCKS,  # again: FSDP freed them after forward
             ("reduce-scatter", "backward"): BLOCKS}  # each block's gradients
predicted_bytes = {("all-reduce", "tp"): (2 * BLOCKS - 1) * B * DIM * 4,  # activations
                   ("all-gather", "dp"): 2 * BLOCKS * DP * shard * 4,  # S: the output
                   ("reduce-scatter", "dp"): BLOCKS * DP * shard * 4}  # S: the input
# --8<-- [end:predict]

# --8<-- [start:count]
KINDS = {"all_reduce": "all-reduce", "_allgather_base_": "all-gather",
         "_reduce_scatter_base_": "reduce-scatter"}
dims, sent = {mesh[d].get_group().group_name: d for d in ("dp", "tp")}, {}


class CommBytesMode(CommDebugMode):  # counts calls, and adds each S to sent[kind, dim]
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = KINDS.get(getattr(func, "__name__", "").split(".")[0])
        if kind and not any(issubclass(t, DTensor) for t in types):
            arg = {a.name: v for a, v in zip(func._schema.arguments, args)}
            group = arg.get("group_name") or dist.ProcessGroup.unbox(
                arg["process_group"]).group_name
            key = kind, dims.get(group, group)  # S: the largest buffer
            sent[key] = sent.get(key, 0) + max(
                t.nbytes for t in args if isinstance(t, torch.Tensor))
        return super().__torch_dispatch__(func, types, args, kwargs)


def report(what, predicted, counted, unit):  # unit: "B", or a word in the singular
    p, c = (f"{n:,} {unit}" + ("" if n == 1 or unit == "B" else "s")
            for n in (predicted, counted))
    if rank == 0:
        print(f"{what}: predicted {p}, counted {c}")
    if predicted != counted:
        failed.append(what)
# --8<-- [end:count]


# --8<-- [start:steps]
# CommDebugMode hooks every module's backward, and torch warns about those hooks twice
warnings.filterwarnings("ignore", "Full backward hook is firing|FSDP2-wrapped .* view")
opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
diff, grad_diff, failed = torch.zeros((), device=device), 0.0, []
for step in (1, 2):  # count step 2, once FSDP has set itself up in step 1
    opt.zero_grad(), opt_ref.zero_grad(), sent.clear()
    x = torch.randn(B * DP, DIM, device=device)  # the same batch on every rank
    with CommBytesMode() as calls:
        out = model(x.chunk(DP)[dp])  # dp rank d: its B rows; tp ranks share them
        out.square().mean().backward()
    (out_ref := ref(x)).square().mean().backward()
    diff = torch.maximum(diff, (out - out_ref.chunk(DP)[dp]).abs().max())
    for a, b in zip(model.parameters(), ref.parameters()):  # every gradient: my piece
        mine = distribute_tensor(b.grad, a.device_mesh, a.placements,  # of one
                                 src_data_rank=None)  # process's, cut as a is
        d = (a.grad.to_local() - mine.to_local()).abs().max() / b.grad.abs().max()
        grad_diff = max(grad_diff, d.item())  # relative to the reference's largest
    opt.step(), opt_ref.step()
for (kind, phase), n in predicted.items():
    ops = calls.comm_module_counts["Global"][phase]  # {op: calls} of the whole model
    report(f"{kind}s in {phase} (CommDebugMode)", n,
           sum(c for op, c in ops.items() if KINDS.get(op.__name__) == kind), "call")
report("collectives of any kind (CommDebugMode)", sum(predicted.values()),
       calls.get_total_counts(), "call")
for (kind, dim), n in predicted_bytes.items():
    report(f"{kind} bytes on {dim}", n, sent.get((kind, dim), 0), "B")
# --8<-- [end:steps]

# --8<-- [start:memory]
def allocated(ts):  # the bytes of the storages behind them, each counted once
    storages = {s.data_ptr(): s.nbytes() for s in map(torch.Tensor.untyped_storage, ts)}
    return sum(storages.values())  # padding included: FSDP pads its shards


report("parameters per rank", BLOCKS * shard * 4,  # after step 2, with its gradients
       allocated(p.to_local() for p in model.parameters()), "B")
report("gradients per rank", BLOCKS * shard * 4,
       allocated(p.grad.to_local() for p in model.parameters()), "B")
P = sum(p.numel() for p in ref.parameters())
if rank == 0:  # more than P/(dp*tp): down.bias is whole on each tp rank, dim 0 padded
    print(f"P = {P:,}, P/(dp*tp) = {P / (DP * TP):,.1f}, each rank: {BLOCKS * shard:,}")
# --8<-- [end:memory]

# --8<-- [start:check]
dist.all_reduce(diff, op=dist.ReduceOp.MAX)  # step 2's output follows step 1's update
grad_diff = torch.tensor(grad_diff, device=device)
dist.all_reduce(grad_diff, op=dist.ReduceOp.MAX)  # every rank's piece
for what, d, bound in [("max abs diff of every rank's outputs", diff.item(), "1e-5"),
                       ("max rel diff of every gradient", grad_diff.item(), "1e-4")]:
    if rank == 0:
        print(f"2 steps, {what} from one process: {d:.1e}\n  " + (
            f"(< {bound}: equal up to float32 round-off)" if d < float(bound)
            else f"(>= {bound}: NOT equal)"))
    if d >= float(bound):
        failed.append(f"{what} from one process")
del model, opt, calls
gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"failed: {', '.join(failed)}")
# --8<-- [end:check]
