"""Checkpoints with DDP: save on rank 0, atomically; wait; load everywhere with
map_location."""

import argparse
import gc
import os
import shutil
import sys
import tempfile
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/checkpoint.py")

local_rank = int(os.environ["LOCAL_RANK"])
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before any other CUDA work
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world_size)]))
own = b"cpu" not in devices and len(devices) == world_size  # a GPU of its own each
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                        timeout=timeout)
if rank == 0:  # which case of the device rule ran
    where = "the CPU" if b"cpu" in devices else f"{len(devices)} GPU(s)"
    print(f"{world_size} processes on {where}: {backend}")
# one directory per torchrun run, the same for every process on this machine
ckpt_dir = os.path.join(
    tempfile.gettempdir(), "ddp-ckpt-" + os.environ["TORCHELASTIC_RUN_ID"]
)
path = os.path.join(ckpt_dir, "model.pt")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
ddp(torch.randn(4, 4, device=device)).sum().backward()
opt.step()


# --8<-- [start:atomic]
def save_atomic(obj, path: str) -> None:
    """Write to a temporary file, then rename: `path` is the old file or the new one."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        # the bytes are on disk before the rename makes them visible
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic on POSIX and Windows, within one file system
# --8<-- [end:atomic]


# --8<-- [start:save]
if rank == 0:  # one writer: every rank holds the same weights
    os.makedirs(ckpt_dir, exist_ok=True)
    save_atomic(
        {"model": ddp.module.state_dict(), "optim": opt.state_dict(), "step": 1}, path
    )
dist.barrier()  # nobody reads before rank 0 has finished writing

ckpt = torch.load(path, map_location=device, weights_only=True)  # to *my* device
model.load_state_dict(ckpt["model"])
opt.load_state_dict(ckpt["optim"])
where = [None] * world_size
dist.all_gather_object(where, str(next(iter(ckpt["model"].values())).device))
if rank == 0:
    print("loaded step", ckpt["step"], "onto:", where)
# --8<-- [end:save]

# --8<-- [start:prefix]
if rank == 0:
    wrapped = ddp.state_dict()  # the DDP wrapper's keys: the model sits in .module
    print("DDP state_dict keys:", list(wrapped)[:2], "...")
    plain = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    try:
        plain.load_state_dict(wrapped)
    except RuntimeError as e:
        print("RuntimeError:\n ", str(e).splitlines()[1].strip(), "...")
    consume_prefix_in_state_dict_if_present(wrapped, "module.")  # in place
    print("after removing the prefix:", plain.load_state_dict(wrapped))
# --8<-- [end:prefix]

# --8<-- [start:crash]
if rank == 0:
    good = open(path, "rb").read()
    with open(path + ".tmp", "wb") as f:  # a crash halfway through save_atomic:
        f.write(good[: len(good) // 2])  # half of the new file, and no rename
    print(
        "atomic: after a crash mid-save, step",
        torch.load(path, weights_only=True)["step"],
        "loads",
    )
    naive = os.path.join(ckpt_dir, "naive.pt")
    with open(naive, "wb") as f:  # the same crash while writing straight into the file
        f.write(good[: len(good) // 2])
    try:
        torch.load(naive, weights_only=True)
    except RuntimeError as e:
        first = str(e).split(". ")[0]  # torch's first sentence; the rest is advice
        print(textwrap.fill(f"direct write: RuntimeError: {first}", 80,
                            subsequent_indent="  "))
    shutil.rmtree(ckpt_dir)
# --8<-- [end:crash]

del ddp, opt
gc.collect()
dist.destroy_process_group()
