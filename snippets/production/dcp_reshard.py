"""One checkpoint, three layouts: saved under FSDP2 by 2 processes, loaded under
tensor parallelism by 2 processes and into one process without a process group; the
weights are the same, bit for bit.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/production/dcp_reshard.py --save /tmp/reshard
     OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/production/dcp_reshard.py --load-tp /tmp/reshard
     python snippets/production/dcp_reshard.py --load-one /tmp/reshard
"""

import argparse
import gc
import os
import shutil
import warnings
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict,
                                                     set_model_state_dict)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
what = parser.add_mutually_exclusive_group(required=True)
what.add_argument("--save", metavar="DIR", help="FSDP2 (torchrun): train a step, save")
what.add_argument("--load-tp", metavar="DIR", help="tensor parallel (torchrun): load")
what.add_argument("--load-one", metavar="DIR", help="one process, no torchrun: load")
args = parser.parse_args()
distributed = args.load_one is None
if distributed != ("LOCAL_RANK" in os.environ):
    sys.exit("--save and --load-tp run under torchrun, --load-one without it: see the "
             "first lines of snippets/production/dcp_reshard.py")
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)  # whole, on rank 0


def make_model(device) -> nn.Module:
    torch.manual_seed(0)
    with torch.device(device):
        return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))


rank = 0
if distributed:
    if 64 % int(os.environ["WORLD_SIZE"]):
        sys.exit("run with 1, 2, 4, 8, 16, 32 or 64 processes: tensor parallelism "
                 "cuts the 64 hidden features into equal shards"
                 if os.environ["RANK"] == "0" else 2)
    local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
    device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
    # The device rule (ddp/hello.py): NCCL only if no two processes got one GPU
    timeout = timedelta(seconds=60)
    store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
    store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
              if gpus else "cpu")
    devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
    backend = "nccl" if b"cpu" not in devices and len(devices) == world else "gloo"
    if backend == "gloo":  # gloo fails on CUDA tensors in DTensor's collectives
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=timeout)
    if rank == 0:
        print(f"{world} processes: {backend} on {device.type}")
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(device.type, (world,))

# --8<-- [start:save]
if args.save:
    from torch.distributed.fsdp import fully_shard
    model = make_model(device)
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 16, device=device)).square().mean().backward()
    opt.step()  # weights no longer their initial values
    if rank == 0:
        shutil.rmtree(args.save, ignore_errors=True)  # no files of an earlier run
    dist.barrier()  # ... before any rank writes its shards there
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=args.save)
    full = get_model_state_dict(model, options=FULL)  # a reference, to compare with
    if rank == 0:
        torch.save(full, args.save + ".full.pt")
        shards = {k: tuple(v.to_local().shape) for k, v in model.state_dict().items()}
        print(f"FSDP2 on {world} processes saved {sorted(os.listdir(args.save))};\n"
              f"rank 0's shards:\n  {shards}")
# --8<-- [end:save]

# --8<-- [start:load_tp]
if args.load_tp:
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    with torch.device("meta"):  # no memory, no initialisation: the checkpoint fills it
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    model.to_empty(device=device)
    sd = get_model_state_dict(model)  # DTensors, laid out for TP: what to fill
    dcp.load({"model": sd}, checkpoint_id=args.load_tp)  # each rank reads its pieces
    set_model_state_dict(model, sd)
    full = get_model_state_dict(model, options=FULL)
    if rank == 0:
        shards = {k: tuple(v.to_local().shape) for k, v in model.state_dict().items()}
        print(f"TP on {world} processes loaded it; rank 0's shards:\n  {shards}")
# --8<-- [end:load_tp]

# --8<-- [start:load_one]
if args.load_one:
    # no_dist=True says it; DCP warns that it loads in one process all the same
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    model = make_model("cpu")  # plain tensors, no process group: DCP reads here
    sd = {"model": model.state_dict()}
    dcp.load(sd, checkpoint_id=args.load_one, no_dist=True)
    set_model_state_dict(model, sd["model"], options=StateDictOptions(strict=True))
    full = model.state_dict()
    print(f"one process loaded it:\n  {({k: tuple(v.shape) for k, v in full.items()})}")
# --8<-- [end:load_one]

if rank == 0 and not args.save:
    ref = torch.load((args.load_tp or args.load_one) + ".full.pt", weights_only=True)
    equal = ref.keys() == full.keys() and all(torch.equal(ref[k], full[k]) for k in ref)
    print(f"  weights against FSDP2's before saving: "
          f"torch.equal on all {len(ref)}: {equal}")
    if not equal:
        sys.exit("the loaded weights differ from the saved ones")
if distributed:
    del model
    gc.collect()
    dist.destroy_process_group()
