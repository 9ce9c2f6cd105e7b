"""DCP and a new optimizer: Adam's state does not exist before its first step.

Run: rm -rf /tmp/faq-optim && OMP_NUM_THREADS=1 torchrun --standalone \
         --nproc-per-node=2 snippets/production/faq_optim_state.py \
         /tmp/faq-optim [--fix]
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
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("ckpt_dir",
                    help="a new folder (on several nodes: one all of them see)")
parser.add_argument("--fix", action="store_true",
                    help="save and load with get_state_dict and set_state_dict")
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
torch.manual_seed(1)
X, Y = torch.randn(6, 8, 8, device=device), torch.randn(6, 8, 1, device=device)


def make():  # what a job builds at start: the model and a new optimizer
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def train(model, opt, steps):  # every rank the same batch: the data is not the point
    for i in steps:
        nn.functional.mse_loss(model(X[i]), Y[i]).backward()
        opt.step()
        opt.zero_grad()


model, opt = make()
train(model, opt, range(3))
if not args.fix:
    # --8<-- [start:bug]
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict()},
             checkpoint_id=args.ckpt_dir)
    # ... the job stops; the next one builds the model and optimizer again:
    model2, opt2 = make()
    state = {"model": model2.state_dict(), "optim": opt2.state_dict()}
    dcp.load(state, checkpoint_id=args.ckpt_dir)  # fills only the keys `state` has
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optim"])
    # --8<-- [end:bug]
else:
    # --8<-- [start:fix]
    model_sd, optim_sd = get_state_dict(model, opt)  # keys by parameter name
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=args.ckpt_dir)
    # ... the job stops; the next one builds the model and optimizer again:
    model2, opt2 = make()
    model_sd, optim_sd = get_state_dict(model2, opt2)  # creates Adam's state first
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=args.ckpt_dir)
    set_state_dict(model2, opt2, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    # --8<-- [end:fix]
if rank == 0:
    print(f"Adam's state after 3 steps: for {len(opt.state)} parameters; "
          f"after loading: for {len(opt2.state)}")
train(model, opt, range(3, 6))  # uninterrupted: 6 steps
train(model2, opt2, range(3, 6))  # resumed: 3 steps, saved, loaded, 3 more
diff = max((p.full_tensor() - q.full_tensor()).abs().max().item()
           for p, q in zip(model2.parameters(), model.parameters()))
if not args.fix:  # the other half: plain keys saved, get_state_dict's keys loaded
    _, optim_sd = get_state_dict(*make())
    try:
        dcp.load({"optim": optim_sd}, checkpoint_id=args.ckpt_dir)
    except dcp.CheckpointException as e:  # a BaseException: not caught by `Exception`
        if rank == 0:
            print(textwrap.fill("the same checkpoint into get_state_dict's keys: "
                                + str(e).strip().splitlines()[-1], 78,
                                subsequent_indent="  "))
if rank == 0:
    verdict = "== 0: bit-identical" if diff == 0 else "!= 0: NOT the same run"
    print(f"resumed vs uninterrupted, 6 steps: max abs diff {diff:.1e} ({verdict})")
dist.destroy_process_group()
if args.fix and diff != 0:  # every rank: the fix must continue the run exactly
    sys.exit("with --fix: the resumed run is not the uninterrupted one")
