"""A DCP checkpoint of a torch.compile'd model: its keys start with _orig_mod.

Run: rm -rf /tmp/faq-keys && OMP_NUM_THREADS=1 torchrun --standalone \
         --nproc-per-node=2 snippets/production/faq_compile_keys.py \
         /tmp/faq-keys [--fix]
(a new folder each time: DCP overwrites a checkpoint it finds there, with a warning)
"""

import argparse
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
                                                     set_model_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("ckpt_dir",
                    help="a new folder (on several nodes: one all of them see)")
parser.add_argument("--fix", action="store_true",
                    help="save and load with get_model_state_dict")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun: see the first lines of this program")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
if torch.cuda.device_count() >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor/FSDP2 collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{world} processes: {backend} on {device.type}")
mesh = init_device_mesh(device.type, (world,))


def make_model(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    fully_shard(model, mesh=mesh)
    return model


trained = make_model(0)  # stands for the model at the end of training
compiled = torch.compile(trained)  # a wrapper: the model is its submodule _orig_mod
saved = [p.full_tensor() for p in trained.parameters()]
plain = make_model(1)  # another job (evaluation, export) builds the model uncompiled
if not args.fix:
    cause = "no error"
    # --8<-- [start:bug]
    dcp.save(compiled.state_dict(), checkpoint_id=args.ckpt_dir)
    try:
        dcp.load(plain.state_dict(), checkpoint_id=args.ckpt_dir)
    except dcp.CheckpointException as e:  # a BaseException: not caught by `Exception`
        cause = str(e).strip().splitlines()[-1]  # last of the ranks' tracebacks
    # --8<-- [end:bug]
    if rank == 0:
        print(f"keys saved: {list(compiled.state_dict())[:2]} ...")
        print(textwrap.fill(f"dcp.load into the plain model: {cause}", 78,
                            subsequent_indent="  "))
    dist.destroy_process_group()
    sys.exit(0)

# --8<-- [start:fix]
dcp.save(get_model_state_dict(compiled), checkpoint_id=args.ckpt_dir)  # no _orig_mod.
state = get_model_state_dict(plain)  # the same keys, from the plain model
dcp.load(state, checkpoint_id=args.ckpt_dir)
set_model_state_dict(plain, state)
# --8<-- [end:fix]
same = all(torch.equal(p.full_tensor(), s) for p, s in zip(plain.parameters(), saved))
inplace = make_model(0)
inplace.compile()  # compiles forward in place: no wrapper, no prefix
if rank == 0:
    print(f"keys saved: {list(get_model_state_dict(compiled))[:2]} ...")
    print(f"the plain model against the weights saved: "
          f"torch.equal on all {len(saved)}: {same}")
    print(f"model.compile() instead: keys {list(inplace.state_dict())[:2]} ...")
dist.destroy_process_group()
if not same:  # every rank: the fix must give back the weights saved
    sys.exit("with --fix: the plain model did not get the weights saved")
