"""FSDP2 in practice: a model built on the meta device, gradient accumulation without
syncing, explicit prefetching, and HSDP (--hsdp), each checked against one process.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/fsdp_practice.py
"""

import argparse
import gc
import os
import sys
import time
import warnings
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--hsdp", action="store_true",
                    help="shard within pairs of processes, replicate across the pairs")
parser.add_argument("--compile", action="store_true",
                    help="compile each block (aot_eager on the CPU, inductor on a GPU)")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/fsdp_practice.py")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
BATCH, MICRO, WIDTH, SEED = 24, 2, 32, 0  # a batch of 24 in 2 micro-batches per step
problem = None
if BATCH % (world * MICRO):
    problem = (f"run with 1, 2, 3, 4, 6 or 12 processes (each takes an equal part of "
               f"{MICRO} micro-batches of a batch of {BATCH}), not {world}")
elif args.hsdp and world % 2:
    problem = f"--hsdp shards within pairs of processes: an even number, not {world}"
if problem:
    sys.exit(problem if rank == 0 else 2)
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


# on the CPU, DTensor warns at each random op that they are CUDA-only (see below)
warnings.filterwarnings("ignore", "DTensor random operators may not have complete")


# FSDP2 calls these functions of torch.distributed by name at every use (all_reduce:
# across HSDP's replicas); before torch 2.13 the first two were *_into_tensor, *_tensor
NEW = hasattr(dist, "all_gather_single")
AG = "all_gather_single" if NEW else "all_gather_into_tensor"
RS = "reduce_scatter_single" if NEW else "reduce_scatter_tensor"


class CountCollectives:
    """Counts FSDP2's collectives."""

    NAMES = (AG, RS, "all_reduce")

    def __enter__(self):
        self.counts, self.saved = Counter(), {n: getattr(dist, n) for n in self.NAMES}
        for name, fn in self.saved.items():
            def counted(*a, _fn=fn, _name=name, **k):
                self.counts[_name] += 1
                return _fn(*a, **k)
            setattr(dist, name, counted)
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(dist, name, fn)


def show(*a):
    if rank == 0:
        print(*a)


show(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")


class Block(nn.Module):  # a forward of our own: what Dynamo traces (see --compile)
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return torch.tanh(self.linear(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# --8<-- [start:mesh]
if args.hsdp:  # 2-D: replicate across pairs, shard within each pair
    mesh = init_device_mesh(device.type, (world // 2, 2),
                            mesh_dim_names=("replicate", "shard"))
else:  # 1-D: shard across all processes
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("shard",))
# --8<-- [end:mesh]

# --8<-- [start:meta]
with torch.device("meta"):  # shapes only: no memory is allocated, nothing initialised
    model = Model()
# --8<-- [end:meta]
# --8<-- [start:compile]
if args.compile:  # compile each block on its own, before sharding it
    compiler = "inductor" if device.type == "cuda" else "aot_eager"  # no C++ build here
    for block in model.blocks:
        block.compile(backend=compiler)
# --8<-- [end:compile]
# --8<-- [start:shard]
for block in model.blocks:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
model.to_empty(device=device)  # each process allocates its own shards, uninitialised
# On CUDA, DTensor's random ops give each shard its own part of one random stream.
# On the CPU they do not: every process would draw the same numbers and the full
# weights would repeat their first rows. There, seed each shard differently; replicas
# of one shard (HSDP) must still agree, so the seed follows the "shard" dimension.
shard_index = mesh.get_local_rank("shard")
torch.manual_seed(SEED + (shard_index if device.type == "cpu" else 0))
for module in model.modules():
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()  # nn.Linear's own initialisation, on the shard
# --8<-- [end:shard]

w = model.blocks[0].linear.weight
show(f"blocks[0].linear.weight: {w.placements},\n  global {tuple(w.shape)}, "
     f"local {tuple(w.to_local().shape)} on rank 0")
held = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
sizes = [None] * world
dist.all_gather_object(sizes, held)
show(f"parameter bytes per process: {sizes}; the full model: {full_bytes}")


def rows_differ(weight) -> bool:
    full = weight.full_tensor()
    return len({tuple(r.tolist()) for r in full}) == full.shape[0]


show("seeded per shard:    rows of blocks[0].linear.weight all different:",
     rows_differ(w))
with torch.device("meta"):  # the pitfall: the same seed on every process
    other = Model()
for block in other.blocks:
    fully_shard(block, mesh=mesh)
fully_shard(other, mesh=mesh)
other.to_empty(device=device)
torch.manual_seed(SEED)
for module in other.modules():
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()
show("one seed everywhere: rows of blocks[0].linear.weight all different:",
     rows_differ(other.blocks[0].linear.weight))
del other

# the reference: one process with the same starting weights, trained on the whole batch
start = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
ref = Model().to(device)
ref.load_state_dict(start)

# --8<-- [start:prefetch]
# FSDP2 all-gathers a block when it is about to run; explicit prefetching starts the
# next block's all-gather earlier, so that it overlaps with the current block's compute
blocks = list(model.blocks)
for this, following in zip(blocks, blocks[1:]):
    this.set_modules_to_forward_prefetch([following])
for this, earlier in zip(blocks[1:], blocks):
    this.set_modules_to_backward_prefetch([earlier])  # backward runs in reverse
# --8<-- [end:prefetch]

opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
per_rank = BATCH // world
micro = per_rank // MICRO
counts = []
seconds = []
for step in range(2):
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, 1, generator=g)
    x, y = x.to(device), y.to(device)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    # --8<-- [start:accumulate]
    with CountCollectives() as comm:
        for i in range(MICRO):
            last = i == MICRO - 1
            # no reduce-scatter until the last micro-batch: gradients stay unsharded
            # and accumulate locally, then one reduce-scatter sends their sum
            model.set_requires_gradient_sync(last)
            part = slice(mine.start + i * micro, mine.start + (i + 1) * micro)
            loss = nn.functional.mse_loss(model(x[part]), y[part]) / MICRO
            loss.backward()
    opt.step()
    opt.zero_grad()
    # --8<-- [end:accumulate]
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds.append(time.perf_counter() - t0)
    counts.append(comm.counts)
    nn.functional.mse_loss(ref(x), y).backward()
    opt_ref.step()
    opt_ref.zero_grad()

c = counts[0]
show(f"one step of {MICRO} micro-batches: {c[AG]} all-gathers, "
     f"{c[RS]} reduce-scatters, {c['all_reduce']} all-reduces")
diff = torch.tensor(max((p.full_tensor() - q).abs().max().item()
                        for p, q in zip(model.parameters(), ref.parameters())))
verdict = ("< 1e-5: equal up to float32 round-off" if diff < 1e-5
           else ">= 1e-5: NOT equal, more than round-off")  # what the figure shows
show(f"after 2 AdamW steps, max abs diff from one process on the whole batch: "
     f"{diff.item():.1e}\n  ({verdict})")
assert diff < 1e-5, "FSDP trained differently from one process on the whole batch"
if args.compile:
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    breaks = sum(counters["graph_break"].values())
    show(f"graphs compiled for {len(blocks)} blocks: {graphs}, graph breaks: {breaks}")
    show(f"compiled blocks: first step {seconds[0] * 1e3:.0f} ms (compiles), then "
         f"{seconds[1] * 1e3:.1f} ms ({seconds[0] / seconds[1]:.0f}x)")

del model, ref, opt, opt_ref
gc.collect()
dist.destroy_process_group()
