"""Every dimension in one model: pipeline, data (replicated and fully sharded), context,
tensor and expert parallelism on one DeviceMesh, their degrees chosen on the command
line; one step equal to one process, each dimension's traffic predicted and counted.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=8 \
         snippets/model_parallel/all_dims.py --fsdp 2 --tp 2 --pp 2
"""

import argparse
import copy
import logging
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

from all_dims_model import D, E, HEADS, LAYERS, Block, Blocks
from all_dims_traffic import Traffic, predict, report

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
for dim, what in [("pp", "pipeline stages"), ("dp", "replicas (HSDP's replicate)"),
                  ("fsdp", "ranks that shard parameters"), ("cp", "ranks that split "
                  "the sequence"), ("tp", "ranks that split the heads"),
                  ("ep", "ranks that split the experts: 1, or fsdp*cp (borrowed)")]:
    parser.add_argument(f"--{dim}", type=int, default=1, help=what)
a = parser.parse_args()
B, S, M = 16, 8, 2  # sequences in the batch, positions in a sequence, micro-batches
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun: " + " ".join(__doc__.split("Run: ")[1].split()))
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
first = at["pp"] * (per := LAYERS // a.pp)  # this stage's blocks: first, first+1, ...
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
for module in [*model.blocks, model] if a.dp * Nf > 1 else []:  # each block, root;
    fully_shard(module, mesh=fsdp_mesh, reshard_after_forward=False,  # as torchtitan
                ignored_params=set(experts))  # with PP: one all-gather per step
(ref_loss := F.mse_loss(ref(x), y)).backward()  # one process, the whole batch
rows = B // (a.dp * a.fsdp)  # sequences per rank: the dp x fsdp ranks split the batch
data = slice((at["dp"] * a.fsdp + at["fsdp"]) * rows, None)
pos = slice(at["cp"] * S // a.cp, (at["cp"] + 1) * S // a.cp)  # cp splits positions
x, y = x[data][:rows, pos].contiguous(), y[data][:rows, pos].contiguous()
micro = [torch.empty(rows // M, S // a.cp, D, requires_grad=g) for g in (True, False)]
stage = PipelineStage(model, at["pp"], a.pp, device, input_args=micro[at["pp"] == 0],
                      output_args=micro[0], group=mesh["pp"].get_group())
schedule = ScheduleGPipe(stage, n_microbatches=M, loss_fn=F.mse_loss)
# --8<-- [end:build]

# --8<-- [start:step]
label = {m.get_group(d).group_name: name for m, d, name in [  # group -> mesh dim
    *((mesh, d, d) for d in ("pp", "dp", "cp", "tp")), (fsdp_cp, "fsdp_cp", "fsdp"),
    *((fsdp_mesh, d, name) for d, name in [("replicate", "dp"), ("shard", "fsdp")]
      if fsdp_mesh.ndim > 1)]}  # ep is fsdp_cp's all-to-all
want = predict(a, n, B, S, M, [blk.moe.chosen for blk in ref.blocks])
losses, last = [], at["pp"] == a.pp - 1
with Traffic(label, stage) as traffic:  # one step: M micro-batches, forward, backward
    schedule.step(*[x][:at["pp"] == 0], **dict(target=y, losses=losses) if last else {})
    for w in experts:  # what FSDP does for the others: the mean over the data ranks
        w.grad /= a.dp * Nf  # (the ep all-to-all summed the fsdp x cp ranks' parts)
        if a.dp > 1:
            dist.all_reduce(w.grad, group=mesh["dp"].get_group())
# --8<-- [end:step]

# --8<-- [start:check]
logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
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
counted = [None] * n
dist.all_gather_object(counted, (traffic.bytes, traffic.calls))
failed = [] if diff < 1e-12 else ["loss and gradients"]
if rank == 0:  # the verdict says what the figure shows
    verdict = ("< 1e-12: equal up to float64 round-off" if not failed
               else ">= 1e-12: NOT equal, more than round-off")
    print(f"loss and every gradient, max abs diff from one process: {diff:.1e}\n"
          f"  ({verdict})")
    failed += report(want, counted)
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted or not equal to one process: {', '.join(failed)}")
# --8<-- [end:check]
