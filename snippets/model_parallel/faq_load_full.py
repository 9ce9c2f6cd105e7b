"""A full pretrained checkpoint into FSDP2: read on rank 0 only, broadcast, sharded.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_load_full.py [--fix]
"""

import argparse
import os
import sys
import tempfile
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     set_model_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="rank 0 reads the file, set_model_state_dict broadcasts it")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_load_full.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{world} processes: {backend} on {device.type}")


def make_model():
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128),
                         nn.ReLU(), nn.Linear(128, 4))


# "pretrained": one process saved a plain model with torch.save
folder = [tempfile.mkdtemp() if rank == 0 else None]
dist.broadcast_object_list(folder)  # one machine: a folder every rank can read
path = os.path.join(folder[0], "pretrained.pt")
if rank == 0:
    torch.manual_seed(0)
    pretrained = make_model()
    torch.save(pretrained.state_dict(), path)
dist.barrier()
mesh = init_device_mesh(device.type, (world,))

# --8<-- [start:shard]
with torch.device("meta"):  # no memory for the weights yet
    model = make_model()
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
model.to_empty(device=device)  # each rank allocates its shards only
# --8<-- [end:shard]

if not args.fix:
    # --8<-- [start:bug]
    full = torch.load(path, map_location=device)  # every rank: the whole model
    try:
        model.load_state_dict(full)  # plain tensors into sharded DTensors
    except RuntimeError as e:
        if rank == 0:
            cause = str(e).split("exception occurred : ('")[-1].split("',)")[0]
            print(textwrap.fill(f"load_state_dict: RuntimeError: {cause}", 78,
                                subsequent_indent="  "))
    # --8<-- [end:bug]
else:
    # --8<-- [start:fix]
    # rank 0 reads the file (mmap: pages in as it is sent); the others hold nothing
    full = torch.load(path, mmap=True, map_location="cpu") if rank == 0 else {}
    set_model_state_dict(model, full, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True))  # tensor by tensor
    # --8<-- [end:fix]
held = [None] * world
dist.all_gather_object(held, sum(t.numel() * t.element_size() for t in full.values()))
if rank == 0:
    print(f"checkpoint bytes read per rank: {held}")
if args.fix:
    mine = sum(p.to_local().numel() for p in model.parameters())
    counts = [None] * world
    dist.all_gather_object(counts, mine)
    torch.manual_seed(0)
    ref = make_model().to(device)  # one process: the pretrained model itself
    diff = max((p.full_tensor() - q).abs().max().item()
               for p, q in zip(model.parameters(), ref.parameters()))
    if rank == 0:
        print(f"parameters held after loading: {counts} of "
              f"{sum(q.numel() for q in ref.parameters())}")
        same = "== 0: bit-identical" if diff == 0 else "!= 0: NOT what was saved"
        print(f"max abs diff from the pretrained model: {diff:.1e} ({same})")
    assert diff == 0, diff
dist.barrier()
if rank == 0:
    os.remove(path)
    os.rmdir(folder[0])
dist.destroy_process_group()
