"""Saving an FSDP2 model without running out of memory: what a full state dict puts on
each rank, a distributed checkpoint, and one file made from its shards afterwards.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp_save.py --save /tmp/fsdp-save
     python snippets/model_parallel/fsdp_save.py \
         --convert /tmp/fsdp-save /tmp/fsdp-save.pt
"""

import argparse
import gc
import os
import shutil
import sys
from datetime import timedelta

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--save", metavar="DIR",
                    help="(under torchrun) save a distributed checkpoint to DIR, and "
                         "rank 0's full state dict to DIR.full.pt")
parser.add_argument("--convert", nargs=2, metavar=("DIR", "FILE"),
                    help="(one process) turn the distributed checkpoint in DIR into "
                         "one file, FILE, and compare it with DIR.full.pt")
args = parser.parse_args()


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))


# --8<-- [start:convert]
if args.convert:  # one process, no process group, no GPU: plain tensors
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    directory, file = args.convert
    dcp_to_torch_save(directory, file)  # reads every shard, writes with torch.save
    converted = torch.load(file, weights_only=True)
    print(f"{file}: {list(converted)} -> {len(converted['model'])} tensors")
    full = torch.load(directory + ".full.pt", weights_only=True)
    assert converted["model"].keys() == full.keys()
    same = all(torch.equal(converted["model"][k], full[k]) for k in full)
    print(f"equal to the full state dict of rank 0: {same}")
    plain = make_model()  # no FSDP
    print("loads into the plain model:", plain.load_state_dict(converted["model"]))
    assert same
    sys.exit(0)
# --8<-- [end:convert]

if not args.save or "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_save.py "
             "--save /tmp/fsdp-save")

import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import (  # noqa: E402
    StateDictOptions,
    get_model_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
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
mesh = init_device_mesh(device.type, (world,))

model = make_model().to(device)
for layer in model[0], model[2]:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)


def held(state: dict) -> str:
    """What one rank holds: tensors, KiB, devices."""
    kib = sum(t.numel() * t.element_size() for t in state.values()) / 1024
    devices = sorted({str(t.device) for t in state.values()})
    return f"{len(state)} tensors, {kib:.0f} KiB on {devices or '-'}"


def every_rank(text: str) -> None:
    texts = [None] * world
    dist.all_gather_object(texts, text)
    if rank == 0:
        for r, t in enumerate(texts):
            print(f"  rank {r}: {t}")


# --8<-- [start:full]
if rank == 0:
    print("full_state_dict=True: every rank gathers the whole model on its device")
every_rank(held(get_model_state_dict(
    model, options=StateDictOptions(full_state_dict=True))))

if rank == 0:
    print("full_state_dict=True, cpu_offload=True: rank 0 only, in host memory")
full = get_model_state_dict(
    model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
every_rank(held(full))
# --8<-- [end:full]

# --8<-- [start:dcp]
if rank == 0:
    shutil.rmtree(args.save, ignore_errors=True)  # no files of an earlier run
    torch.save(full, args.save + ".full.pt")  # for --convert to compare with
dist.barrier()
dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=args.save)
if rank == 0:  # every rank wrote its own shards, in parallel
    print(f"{args.save}: {sorted(os.listdir(args.save))}")
# --8<-- [end:dcp]

del model
gc.collect()
dist.destroy_process_group()
