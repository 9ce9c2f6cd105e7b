"""How long dcp.save and dcp.async_save block the training loop, and the bytes each
process writes (its shard), predicted and counted in the checkpoint's metadata.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/production/dcp_async.py
"""

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/dcp_async.py")
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
# The device rule (ddp/hello.py): NCCL only if no two processes got one GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
if b"cpu" not in devices and len(devices) == world:  # NCCL, and gloo for async_save
    backend = "cpu:gloo,cuda:nccl"
    torch.cuda.set_device(device)
else:  # gloo fails on CUDA tensors in FSDP2's collectives: the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        timeout=timeout)
WIDTH, LAYERS, BATCH = 1024, 4, 8
if rank == 0:
    print(f"{world} processes, {gpus} GPUs here: {backend} on {device.type}")

torch.manual_seed(0)
with torch.device(device):
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
                            for _ in range(LAYERS)])
mesh = init_device_mesh(device.type, (world,))
for block in model:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)  # sharded momentum


def train_step(step: int, before_update=lambda: None) -> None:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(BATCH, WIDTH, generator=g).to(device)
    model(x).square().mean().backward()
    before_update()
    opt.step()
    opt.zero_grad()


root = tempfile.mkdtemp(prefix="dcp-async-") if rank == 0 else None
box = [root]
dist.broadcast_object_list(box)  # every rank writes into the same folder
root = box[0]

# --8<-- [start:async]
# DCP's collectives run on the thread that saves: give them a group of their own, so
# they never interleave with the training loop's collectives on the default group
ckpt_group = dist.new_group(backend="gloo")
for step in range(2):
    train_step(step)

t0 = time.perf_counter()
model_sd, optim_sd = get_state_dict(model, opt)
dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=f"{root}/sync",
         process_group=ckpt_group)
blocked_sync = time.perf_counter() - t0  # the loop waited for the whole write

t0 = time.perf_counter()
model_sd, optim_sd = get_state_dict(model, opt)
pending = dcp.async_save({"model": model_sd, "optim": optim_sd},
                         checkpoint_id=f"{root}/async", process_group=ckpt_group)
blocked_async = time.perf_counter() - t0  # only the copy into CPU memory ("staging")
# what the checkpoint must hold
saved = {k: v.to_local().clone() for k, v in model.state_dict().items()}
for step in range(2, 4):  # training goes on while a thread writes the files
    train_step(step)
pending.result()  # wait before the next save, and before the process exits
# --8<-- [end:async]

# --8<-- [start:report]
ratio = blocked_sync / blocked_async
if rank == 0:
    print(f"loop blocked by dcp.save: {blocked_sync * 1e3:.1f} ms, by dcp.async_save: "
          f"{blocked_async * 1e3:.1f} ms\n  ({ratio:.1f}x shorter; {world} processes, "
          f"{device.type}, local disk)")

# the asynchronous checkpoint holds the weights of the moment it was taken
fresh_sd, fresh_optim = get_state_dict(model, opt)
state = {"model": fresh_sd, "optim": fresh_optim}
dcp.load(state, checkpoint_id=f"{root}/async")
set_state_dict(model, opt, model_state_dict=state["model"],
               optim_state_dict=state["optim"])
same = all(torch.equal(v.to_local(), saved[k]) for k, v in model.state_dict().items())
if rank == 0:
    print(f"async checkpoint loaded back: the weights after step 1,\n  "
          f"torch.equal on every shard: {same}")
assert same, "the asynchronous checkpoint does not hold the weights it was given"
# --8<-- [end:report]

# --8<-- [start:stager]
# A stager of our own copies in the background (on a GPU into pinned memory, from a
# side stream; the CPU has neither): async_save returns before the copy is done
stager = DefaultStager(StagingOptions() if device.type == "cuda" else
                       StagingOptions(use_pinned_memory=False, use_shared_memory=False,
                                      use_async_staging=True,
                                      use_non_blocking_copy=False))
saved = {k: v.to_local().clone() for k, v in model.state_dict().items()}
t0 = time.perf_counter()
model_sd, optim_sd = get_state_dict(model, opt)
response = dcp.async_save({"model": model_sd, "optim": optim_sd},
                          checkpoint_id=f"{root}/staged", process_group=ckpt_group,
                          async_stager=stager)
blocked_staged = time.perf_counter() - t0
# forward and backward overlap the copy; the weights must not change before it ends
train_step(4, before_update=response.staging_completion.result)
train_step(5)
response.upload_completion.result()  # before the next save, and before exiting
stager.close()  # after the last save: its thread and its buffers
# --8<-- [end:stager]
fresh_sd, fresh_optim = get_state_dict(model, opt)
state = {"model": fresh_sd, "optim": fresh_optim}
dcp.load(state, checkpoint_id=f"{root}/staged")
set_state_dict(model, opt, model_state_dict=state["model"],
               optim_state_dict=state["optim"])
same = all(torch.equal(v.to_local(), saved[k]) for k, v in model.state_dict().items())
if rank == 0:
    print(f"loop blocked by async_save with a background stager: "
          f"{blocked_staged * 1e3:.1f} ms")
    print(f"  its checkpoint: the weights after step 3, torch.equal on every shard: "
          f"{same}")
assert same, "the staged checkpoint does not hold the weights it was given"


# --8<-- [start:bytes]
def predicted_bytes(r: int) -> int:
    """Rank r's shard of every weight, bias and momentum buffer: FSDP2 splits dim 0 in
    world pieces of ceil(rows / world) rows, the last ones shorter or empty."""
    total = 0
    for p in model.parameters():
        rows = p.shape[0]
        chunk = -(-rows // world)
        mine = max(0, min(chunk, rows - r * chunk))
        total += 2 * mine * (p.numel() // rows) * p.element_size()  # param + momentum
    return total


# counted: what the checkpoint's metadata says each rank's file holds
meta = dcp.FileSystemReader(f"{root}/sync").read_metadata()
counted, pickled = [0] * world, []
for index, info in meta.storage_data.items():
    item = meta.state_dict_metadata[index.fqn]
    if not hasattr(item, "chunks"):  # not a tensor: a pickled value (lr, momentum, ...)
        pickled.append(index.fqn)
        continue
    chunk = next(c for c in item.chunks if c.offsets == index.offset)
    writer = int(info.relative_path.split("_")[2])  # __<rank>_0.distcp
    counted[writer] += chunk.sizes.numel() * item.properties.dtype.itemsize
failed = [r for r in range(world) if predicted_bytes(r) != counted[r]]
if rank == 0:
    for r in range(world):
        print(f"tensor bytes written by rank {r}: predicted {predicted_bytes(r):,} B, "
              f"counted {counted[r]:,} B")
    hyper = all(k.startswith("optim.param_groups.") for k in pickled)
    print(f"not tensors, pickled and written once: the optimizer's settings: {hyper}")
    print("files:", " ".join(sorted(os.listdir(f"{root}/sync"))))
# --8<-- [end:bytes]

dist.barrier()
if rank == 0:
    shutil.rmtree(root, ignore_errors=True)
del model, opt
gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: bytes written by rank(s) {failed}")
