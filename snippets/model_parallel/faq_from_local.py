"""DTensor.from_local with pieces of different sizes: the global shape is guessed.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/faq_from_local.py [--fix]
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--fix", action="store_true",
                    help="pieces cut like torch.chunk, and the global shape given")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/faq_from_local.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if world != 2:
    sys.exit(f"run with 2 processes (the pieces are cut for two), not {world}"
             if rank == 0 else 2)
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo crashed on CUDA tensors in DTensor collectives: use the CPU
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{world} processes: {backend} on {device.type}")
mesh = init_device_mesh(device.type, (world,))
full = torch.arange(14.0, device=device).view(7, 2)  # one process's tensor: 7 rows


def report(d, label):
    shapes = [None] * world
    dist.all_gather_object(shapes, tuple(d.shape))
    mean = d.mean().item()  # a DTensor op: local sums all-reduced, / the global size
    means = [None] * world
    dist.all_gather_object(means, round(mean, 4))
    if rank == 0:
        print(f"{label}: rows per rank {[len(p) for p in pieces]}")
        print(f"  global shape on each rank: {shapes}")
        one = round(full.mean().item(), 4)
        print(f"  mean on each rank: {means}; one process: {one}")
    return all(s == tuple(full.shape) for s in shapes), means


if not args.fix:
    # --8<-- [start:bug]
    pieces = [full[:5], full[5:]]  # this rank's rows: 5 on rank 0, 2 on rank 1
    d = DTensor.from_local(pieces[rank], mesh, [Shard(0)])
    # --8<-- [end:bug]
    report(d, "from_local(piece)")
    # --8<-- [start:bug-shape]
    d = DTensor.from_local(pieces[rank], mesh, [Shard(0)],
                           shape=full.shape, stride=full.stride())
    # --8<-- [end:bug-shape]
    same = torch.equal(d.full_tensor(), full)
    if rank == 0:
        print(f"with shape=: full_tensor() equal to the 7 rows: {same}")
    dist.destroy_process_group()
    sys.exit(0)

# --8<-- [start:fix]
pieces = torch.chunk(full, world)  # DTensor's cut: 4 rows on rank 0, 3 on rank 1
d = DTensor.from_local(pieces[rank], mesh, [Shard(0)],
                       shape=full.shape, stride=full.stride())  # not guessed
# --8<-- [end:fix]
shape_ok, means = report(d, "from_local(chunk, shape=)")
same = torch.tensor(int(shape_ok and torch.equal(d.full_tensor(), full)
                        and all(abs(m - full.mean().item()) < 1e-6 for m in means)))
dist.all_reduce(same, op=dist.ReduceOp.MIN)
if rank == 0:
    print(f"shape, mean and full_tensor() as one process's: {bool(same)}")
dist.destroy_process_group()
if not same:  # the fix must give one process's tensor
    sys.exit("with --fix: not the tensor one process has")
