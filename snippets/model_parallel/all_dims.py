"""Every dimension in one model: pipeline, data (replicated and fully sharded), context,
tensor and expert parallelism on one DeviceMesh, their degrees chosen on the command
line; one step equal to one process, each dimension's traffic predicted and counted.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=8 \
         snippets/model_parallel/all_dims.py --fsdp 2 --tp 2 --pp 2
"""

import argparse
import copy
import math
import os
import sys
import warnings
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)
from torch.utils._python_dispatch import TorchDispatchMode

from all_dims_model import D, E, FF, HEADS, LAYERS, Block, Blocks

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
for dim, what in [("pp", "pipeline stages"), ("dp", "replicas (HSDP's replicate)"),
                  ("fsdp", "ranks that shard parameters"), ("cp", "ranks that split "
                  "the sequence"), ("tp", "ranks that split the heads"),
                  ("ep", "ranks that split the experts: 1, or fsdp*cp (it borrows them)")]:
    parser.add_argument(f"--{dim}", type=int, default=1, help=what)
a = parser.parse_args()
B, S, M = 16, 8, 2  # sequences in the batch, positions in a sequence, micro-batches
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=8 snippets/model_parallel/all_dims.py --fsdp 2 --tp 2 "
             "--pp 2")
n, Nf = int(os.environ["WORLD_SIZE"]), a.fsdp * a.cp  # Nf: ranks FSDP shards over
why = (f"pp*dp*fsdp*cp*tp = {a.pp * a.dp * Nf * a.tp}, not the {n} processes"
       if a.pp * a.dp * Nf * a.tp != n else f"--tp {a.tp} does not divide {HEADS} heads"
       if HEADS % a.tp else f"--pp {a.pp} does not divide {LAYERS} blocks"
       if LAYERS % a.pp else f"--cp {a.cp} does not divide {S} positions" if S % a.cp
       else f"dp*fsdp*{M} micro-batches does not divide {B} sequences"
       if B % (a.dp * a.fsdp * M) else f"--ep must be 1 or fsdp*cp = {Nf}"
       if a.ep not in (1, Nf) else f"--ep {a.ep} does not divide {E} experts"
       if E % a.ep else "")
if why:  # one line, from rank 0
    sys.exit(why if os.environ["RANK"] == "0" else 2)
# The device rule (ddp/cost.py): NCCL only if each process has a GPU of its own (UUID)
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
timeout = timedelta(seconds=60)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
own = b"cpu" not in devices and len(devices) == world
device = device if own else torch.device("cpu")  # gloo fails on CUDA tensors here
if own:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if own else "gloo", store=store, rank=rank,
                        world_size=world, timeout=timeout)
torch.set_default_device(device)

# --8<-- [start:mesh]
names = ("pp", "dp", "fsdp", "cp", "tp")  # outermost to innermost, as in torchtitan
mesh = dist.init_device_mesh(device.type, [getattr(a, d) for d in names],
                             mesh_dim_names=names)
fsdp_cp = mesh["fsdp", "cp"]._flatten("fsdp_cp")  # FSDP shards over both, EP too
fsdp_mesh = fsdp_cp if a.dp == 1 else mesh["dp", "fsdp", "cp"]._flatten()._unflatten(
    0, (a.dp, Nf), ("replicate", "shard"))  # HSDP: replicas of fsdp x cp shards
at = {d: mesh[d].get_local_rank() for d in names}  # this rank's place on each
if rank == 0:
    print(f"{world} processes, {dist.get_backend()} on {device.type}, mesh "
          + " x ".join(f"{d} {getattr(a, d)}" for d in names))
    for i, d in enumerate(names + ("fsdp_cp",)):
        size, dims = (Nf, [2, 3]) if d == "fsdp_cp" else (getattr(a, d), [i])
        if size > 1:  # the ranks of each group: the mesh with that axis last
            groups = mesh.mesh.movedim(dims, [-len(dims) + j for j in range(len(dims))])
            print(f"{d} groups: {groups.reshape(-1, size).tolist()}")
# --8<-- [end:mesh]

# --8<-- [start:build]
torch.set_default_dtype(torch.float64)
torch.manual_seed(0)  # every rank builds the whole model and batch, then keeps its part
ref, (x, y) = Blocks([Block() for _ in range(LAYERS)]), torch.randn(2, B, S, D)
per = LAYERS // a.pp  # blocks per stage
first = at["pp"] * per
model = Blocks(copy.deepcopy(ref.blocks[first:first + per]))
experts = []  # in the same order on every rank: they are all-reduced in it
for block in model.blocks:
    if a.tp > 1:  # heads split: q, k, v by columns, the output projection by rows
        parallelize_module(block.attn, mesh["tp"], {
            "wq": ColwiseParallel(), "wk": ColwiseParallel(), "wv": ColwiseParallel(),
            "wo": RowwiseParallel()})
    if a.cp > 1:
        block.attn.cp = mesh["cp"].get_group()
    if a.ep > 1:  # the experts split over the fsdp x cp ranks; FSDP leaves them be
        block.moe.keep(fsdp_cp.get_group())
        experts += [block.moe.w1, block.moe.w2]
for module in [*model.blocks, model] if a.dp * Nf > 1 else []:  # each block, root
    fully_shard(module, mesh=fsdp_mesh, reshard_after_forward=False,  # as torchtitan
                ignored_params=set(experts))  # with PP: gathered once per step, not per
    # micro-batch
ref_loss = F.mse_loss(ref(x), y)  # one process, the whole batch: the reference
ref_loss.backward()
rows = B // (a.dp * a.fsdp)  # sequences per rank: the dp x fsdp ranks split the batch
data = slice((at["dp"] * a.fsdp + at["fsdp"]) * rows, None)
pos = slice(at["cp"] * S // a.cp, (at["cp"] + 1) * S // a.cp)  # cp splits positions
x, y = x[data][:rows, pos], y[data][:rows, pos]
micro = [torch.empty(rows // M, S // a.cp, D, requires_grad=g) for g in (True, False)]
stage = PipelineStage(model, at["pp"], a.pp, device, input_args=micro[at["pp"] == 0],
                      output_args=micro[0], group=mesh["pp"].get_group())
schedule = ScheduleGPipe(stage, n_microbatches=M, loss_fn=F.mse_loss)
# --8<-- [end:build]

# --8<-- [start:count]
OPS = {"allreduce_": "all_reduce", "all_reduce": "all_reduce", "send": "send",
       "_allgather_base_": "all_gather", "_reduce_scatter_base_": "reduce_scatter",
       "alltoall_base_": "all_to_all"}
label = {mesh[d].get_group().group_name: d for d in ("pp", "dp", "cp", "tp")}
label |= {m.get_group(d).group_name: name for m, d, name in  # ep: by its op
          [(fsdp_cp, "fsdp_cp", "fsdp")] + [(fsdp_mesh, d, name) for d, name in
          [("replicate", "dp"), ("shard", "fsdp")] if fsdp_mesh.ndim > 1]}
phase, counted, calls = ["warm-up"], Counter(), Counter()


class Traffic(TorchDispatchMode):  # adds each collective's bytes to its mesh dim
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = OPS.get(getattr(func, "__name__", "").split(".")[0])
        if op and not any(issubclass(t, DTensor) for t in types):
            arg = {s.name: v for s, v in zip(func._schema.arguments, args)}
            pg = (dist.distributed_c10d._resolve_process_group(arg["group_name"])
                  if "group_name" in arg else dist.ProcessGroup.unbox(
                      arg["process_group"]))
            t = (arg["output_tensor"] if op == "all_gather" else arg["input_tensor"]
                 if op == "reduce_scatter" else arg["tensors"][0] if "tensors" in arg
                 else arg["input"])  # the whole buffer, S, as in twod_cost.py
            if op == "all_to_all":  # rows for other ranks only, as snippets/expert
                split = arg["input_split_sizes"] or [len(t) // pg.size()] * pg.size()
                t = t[:len(t) - split[pg.rank()]]
            if pg.size() > 1:  # a group of one moves nothing
                key = ("ep" if op == "all_to_all" else label[pg.group_name],
                       phase[0], op)
                counted[key] += t.numel() * t.element_size()
                calls[key] += 1
        return func(*args, **(kwargs or {}))


for name in ("forward", "backward"):  # which phase the pipeline schedule is in
    run = getattr(stage, f"{name}_one_chunk")
    setattr(stage, f"{name}_one_chunk", lambda *args, run=run, name=name, **kw: (
        phase.__setitem__(0, name) or run(*args, **kw)))
# --8<-- [end:count]

# --8<-- [start:predict]
T = rows // M * (S // a.cp)  # tokens of a micro-batch on a rank
act, units = T * D * 8, n * per  # bytes of its activation; blocks on all ranks, summed
tp_rows = [(D // a.tp, D)] * 3 + [(D, D // a.tp), (E, D)]  # wq wk wv wo router, local
tp_rows += [(E, D * FF)] * 2 if a.ep == 1 else []  # w1 w2 too, unless EP holds them
shard = sum(math.ceil(r / Nf) * c for r, c in tp_rows) * 8  # FSDP pads dim 0 to Nf
want = {}  # (dim, phase, op): (calls, bytes), summed over all ranks, per step
if a.tp > 1:  # forward: wo's output; backward: the input grads of wq, wk, wv, except
    want["tp", "forward", "all_reduce"] = units * M, units * M * act
    bwd = n // a.pp * M * 3 * (LAYERS - 1)  # in block 0, whose input is the data
    want["tp", "backward", "all_reduce"] = bwd, bwd * act
if a.cp > 1:  # the keys and values of all S positions, of this rank's heads
    kv = 2 * rows // M * S * D // a.tp * 8
    want["cp", "forward", "all_gather"] = units * M, units * M * kv
    want["cp", "backward", "reduce_scatter"] = units * M, units * M * kv
if Nf > 1:  # each block gathered before its first forward, reduced after the last
    want["fsdp", "forward", "all_gather"] = units, units * Nf * shard
    want["fsdp", "backward", "reduce_scatter"] = units, units * Nf * shard
if a.dp > 1:  # HSDP all-reduces each block's shard; this program, EP's experts
    ex = 2 if a.ep > 1 else 0  # w1, w2: E/ep experts each
    want["dp", "backward", "all_reduce"] = units * (1 + ex), units * (
        shard + ex * E // a.ep * D * FF * 8)
if a.ep > 1:  # token rows sent to an expert on another rank, and their results back
    i, j = torch.arange(B).repeat_interleave(S), torch.arange(S).repeat(B)
    ep_of = i // rows % a.fsdp * a.cp + j // (S // a.cp)  # the ep rank of each token
    far = a.tp * sum(int((blk.moe.chosen // (E // a.ep) != ep_of[:, None]).sum())
                     for blk in ref.blocks)  # the experts ref's tokens chose
    counts = units * M * E * (a.ep - 1) // a.ep * 8  # the counts first, int64
    want["ep", "forward", "all_to_all"] = 3 * units * M, counts + 2 * far * D * 8
    want["ep", "backward", "all_to_all"] = 2 * units * M, 2 * far * D * 8
if a.pp > 1:  # each stage but the last sends activations on, each but the first
    sends = n // a.pp * (a.pp - 1) * M  # gradients back
    want["pp", "forward", "send"] = want["pp", "backward", "send"] = sends, sends * act
    votes = n // a.pp * (a.pp - 1) * 2  # first step only: the stages vote whether the
    want["pp", "warm-up", "send"] = votes, votes * 4  # shapes are static, an int32 each
# --8<-- [end:predict]

# --8<-- [start:step]
losses, last = [], at["pp"] == a.pp - 1
with Traffic():  # one step: the schedule runs forward and backward of each micro-batch
    schedule.step(*[x][:at["pp"] == 0], **dict(target=y, losses=losses) if last else {})
    for w in experts:  # what FSDP does for the others: the mean over the data ranks
        w.grad /= a.dp * Nf  # (the ep all-to-all summed the fsdp x cp ranks' parts)
        if a.dp > 1:
            dist.all_reduce(w.grad, group=mesh["dp"].get_group())
# --8<-- [end:step]

# --8<-- [start:check]
warnings.filterwarnings("ignore", ".*all-gathers in a row")  # full_tensor() of 2-D
diff = torch.tensor(0.0)
for name, p in model.named_parameters():  # blocks.<i>.<rest>, as in ref
    _, i, rest = name.split(".", 2)
    want_grad = ref.blocks[first + int(i)].get_parameter(rest).grad
    if a.ep > 1 and rest.endswith(("w1", "w2")):  # this rank's experts only
        r, k = fsdp_cp.get_local_rank(), E // a.ep
        want_grad = want_grad[r * k:(r + 1) * k]
    grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
    diff = torch.maximum(diff, (grad - want_grad).abs().max())
loss = torch.stack(losses).mean().detach() if last else torch.tensor(0.0)
dist.all_reduce(loss)  # the last stage's ranks: each the mean loss of its part
diff = torch.maximum(diff, (loss / (n // a.pp) - ref_loss).abs())
dist.all_reduce(diff, op=dist.ReduceOp.MAX)
everyone = [None] * n
dist.all_gather_object(everyone, (counted, calls))
failed = [] if diff < 1e-12 else ["loss and gradients"]
if rank == 0:
    print(f"loss and every gradient, max abs diff from one process: {diff:.1e} "
          "(< 1e-12: equal up to float64 round-off)")
    counted, calls = (sum((e[i] for e in everyone), Counter()) for i in (0, 1))
    for key in sorted(set(want) | set(counted), key=str):
        what, (n_calls, n_bytes) = ", ".join(key), want.get(key, (0, 0))
        for unit, p, c in [("calls", n_calls, calls[key]), ("B", n_bytes, counted[key])]:
            print(f"{what} {'bytes' if unit == 'B' else 'calls'}: predicted {p:,} "
                  f"{unit}, counted {c:,} {unit}")
            failed += [f"{what} {unit}"] if p != c else []
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted or not equal to one process: {', '.join(failed)}"
             if rank == 0 else 1)
# --8<-- [end:check]
