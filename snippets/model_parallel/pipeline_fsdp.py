"""FSDP2 inside one pipeline stage: the all-gathers, reduce-scatters and bytes kept
between the M micro-batches of a step, with and without reshard_after_forward,
predicted and counted; every setting's gradients compared with one process's.

The processes are the FSDP group of one stage: the stage runs M micro-batches
forward, then M backward (GPipe's order), in a loop or through a schedule.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/pipeline_fsdp.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.utils._python_dispatch import TorchDispatchMode

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/pipeline_fsdp.py")
if int(os.environ["WORLD_SIZE"]) not in (2, 4, 8):  # rows 32 and 16: no padding
    sys.exit("run with 2, 4 or 8 processes" if os.environ["RANK"] == "0" else 2)
# The device rule of fsdp_cost.py: NCCL only if no two processes got one GPU
gpus, timeout = torch.cuda.device_count(), timedelta(seconds=60)
store, rank, n = next(dist.rendezvous("env://", timeout=timeout))
gpu = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % gpus) if gpus else None
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(gpu).uuid) if gpus
          else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(n)]))
own = b"cpu" not in devices and len(devices) == n
device = gpu if own else torch.device("cpu")
if own:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if own else "gloo", store=store, rank=rank,
                        world_size=n, timeout=timeout)
mesh = init_device_mesh(device.type, (1, n), mesh_dim_names=("pp", "fsdp"))

# --8<-- [start:model]
M, b = 4, 2  # micro-batches per step, rows per micro-batch and rank
torch.manual_seed(0)  # every process: the same stage, the same whole batch
X, Y = torch.randn(n * M * b, 16), torch.randn(n * M * b, 16)


def build():  # the stage's layers, the same on every process
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 16)).to(device)


def make_stage(reshard):
    stage = build()
    for unit in stage[::2]:  # each Linear an FSDP unit; the root holds no parameter
        fully_shard(unit, mesh=mesh["fsdp"], reshard_after_forward=reshard)
    return fully_shard(stage, mesh=mesh["fsdp"], reshard_after_forward=reshard)


reference = build()  # one process, the whole batch, no FSDP
F.mse_loss(reference(X.to(device)), Y.to(device)).backward()
want = [p.grad for p in reference.parameters()]
P = sum(p.numel() for p in reference.parameters()) * 4  # the stage's bytes, float32
mine = slice(rank * M * b, (rank + 1) * M * b)  # this rank's share of the batch
xs, ys = X[mine].to(device).chunk(M), Y[mine].to(device).chunk(M)
# --8<-- [end:model]


# --8<-- [start:count]
def nbytes(t):
    return t.numel() * t.element_size()


class Collectives(TorchDispatchMode):  # sees every op run while it is active
    def __init__(self):
        super().__init__()
        self.gathered = self.reduced = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = func.overloadpacket  # FSDP2's collectives: (output, input, group, ...)
        if op == torch.ops.c10d._allgather_base_:
            self.gathered += nbytes(args[0])  # the whole buffer, gathered
        elif op == torch.ops.c10d._reduce_scatter_base_:
            self.reduced += nbytes(args[1])  # the whole buffer, reduced
        return func(*args, **(kwargs or {}))


def held(stage):
    """Bytes of the parameter and gradient storages that FSDP holds for the stage:
    the shards always, the unsharded parameters and gradients while they live."""
    live = {}
    for unit in [stage, *stage[::2]]:
        group = unit._get_fsdp_state()._fsdp_param_group  # private (torch 2.13)
        for fp in group.fsdp_params if group else []:
            full = getattr(fp, "_unsharded_param", None)  # made at the first gather
            for t in (fp.sharded_param, fp.sharded_param.grad, full,
                      None if full is None else full.grad):
                if t is not None:  # a DTensor's shard, or a plain tensor
                    s = getattr(t, "_local_tensor", t).untyped_storage()
                    live[s.data_ptr()] = s.nbytes()  # 0 once FSDP freed it
    return sum(live.values())
# --8<-- [end:count]


# --8<-- [start:loop]
def loop(stage, setting, kept):
    """M forwards, then M backwards; FSDP's switches set before each backward."""
    outs = [stage(x) for x in xs]
    for i, (out, y) in enumerate(zip(outs, ys)):
        last = i == M - 1
        stage.set_is_last_backward(last)  # keeps the backward prefetch order
        if setting != "reshard":  # gradients stay unsharded until the last
            stage.set_requires_gradient_sync(last)
        if setting == "keep":  # and the parameters too
            stage.set_reshard_after_backward(last)
        (F.mse_loss(out, y) / M).backward()
        kept.append(held(stage))


def schedule(stage, Schedule, kept):
    """A one-stage pipeline: the schedule sets FSDP's switches itself."""
    pipe = PipelineStage(stage, 0, 1, device, input_args=xs[0], output_args=ys[0],
                         group=mesh["pp"].get_group())
    step = pipe.backward_one_chunk

    def logged(*args, **kwargs):  # after each micro-batch's backward
        step(*args, **kwargs)
        kept.append(held(stage))
    pipe.backward_one_chunk = logged
    Schedule(pipe, n_microbatches=M, loss_fn=F.mse_loss).step(
        torch.cat(xs), target=torch.cat(ys))
# --8<-- [end:loop]


# --8<-- [start:predict]
shards = P // n  # this rank's shards of the stage, held in any case
runs = {  # name: reshard_after_forward, all-gathers and reduce-scatters of the whole
    # stage per step, and the bytes held after each backward but the last
    "reshard": (True, 2 * M, M, shards + shards),  # + the gradients' shards
    "no sync": (True, 2 * M, 1, shards + P),  # + the unsharded gradients
    "keep": (False, 1, 1, shards + P + P),  # + the unsharded parameters too
    # a schedule reshards after no backward but the last: with True, the first
    # action and each one that follows a forward gather, M + 1 in all
    "GPipe, True": (True, M + 1, 1, shards + P + P),
    "GPipe, False": (False, 1, 1, shards + P + P),
    "1F1B, True": (True, M + 1, 1, shards + P + P)}
# --8<-- [end:predict]

# --8<-- [start:run]
failed, grads = [], {}


def report(what, predicted, counted):
    if rank == 0:
        print(f"{what}: predicted {predicted:,} B, counted {counted:,} B")
    if predicted != counted:
        failed.append(what)


def worst(got, ref):  # each tensor relative to its reference's largest value
    return max(((g - w).abs().max() / w.abs().max()).item() for g, w in zip(got, ref))


if rank == 0:
    print(f"{n} processes, {'NCCL' if own else 'gloo on the CPU'}: one stage's FSDP "
          f"group\nstage: {P:,} B in 2 units, M = {M} micro-batches; kept: after "
          "each backward\nbut the last; GPipe, X: ScheduleGPipe, "
          "reshard_after_forward=X")
for name, (reshard, gathers, reduces, keeps) in runs.items():
    stage, kept = make_stage(reshard), []
    with Collectives() as c:
        if "," in name:
            schedule(stage, {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[
                name.split(",")[0]], kept)
        else:
            loop(stage, name, kept)
    report(f"all-gather per step, {name}", gathers * P, c.gathered)
    report(f"reduce-scatter per step, {name}", reduces * P, c.reduced)
    report(f"kept between micro-batches, {name}", keeps, max(kept[:-1]))
    grads[name] = [p.grad.full_tensor() for p in stage.parameters()]
    diff = worst(grads[name], want)
    if rank == 0:
        print(f"grads, {name}: max rel diff to one process {diff:.1e}"
              + (" (< 1e-5)" if diff < 1e-5 else ""))
    if not diff < 1e-5:
        failed.append(f"grads, {name}")
spread = max(worst(got, grads["reshard"]) for got in grads.values())
if rank == 0:
    print(f"the 6 runs' grads to each other: {spread:.1e}"
          + (" (< 1e-5: equal up to float32 round-off)" if spread < 1e-5 else ""))
# --8<-- [end:run]

dist.destroy_process_group()
if failed or not spread < 1e-5:
    sys.exit(f"rank {rank}: failed: {', '.join(failed) or 'the runs differ'}")
