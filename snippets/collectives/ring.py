"""A ring all-reduce written from send and receive, equal to dist.all_reduce, and the
bytes it sends, predicted by the formula and counted.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 \
         snippets/collectives/ring.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=4 snippets/collectives/ring.py")
if int(os.environ["WORLD_SIZE"]) < 2:
    sys.exit("run with at least 2 processes: a ring of one process sends nothing")

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
gpus = torch.cuda.device_count()
if gpus >= local_world:  # one GPU per process: NCCL
    device, backend = torch.device("cuda", local_rank), "nccl"
    torch.cuda.set_device(device)
else:  # gloo's send/recv fail on CUDA tensors ('Bad address'): use the CPU
    device, backend = torch.device("cpu"), "gloo"
    if gpus and rank == 0:
        print(f"{gpus} GPU(s) for {local_world} processes: running on the CPU")
dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                        timeout=timedelta(seconds=60))
if rank == 0:
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")
# torch 2.13 deprecates the old names; older releases have only those
all_gather_single = (getattr(dist, "all_gather_single", None)
                     or dist.all_gather_into_tensor)
reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                         or dist.reduce_scatter_tensor)

# --8<-- [start:step]
right, left = (rank + 1) % world, (rank - 1) % world
sent = {"bytes": 0, "sends": 0}  # what this rank passed to isend


def step(out: torch.Tensor, into: torch.Tensor) -> None:
    """One ring step: send `out` to the right, receive `into` from the left."""
    sent["bytes"] += out.numel() * out.element_size()
    sent["sends"] += 1
    req = dist.isend(out, dst=right)  # every rank sends and receives at once
    dist.recv(into, src=left)
    req.wait()
# --8<-- [end:step]


# --8<-- [start:ring]
def ring_reduce_scatter(chunks: list) -> None:
    """n-1 steps; afterwards chunks[rank] holds the sum over all ranks."""
    tmp = torch.empty_like(chunks[0])
    for s in range(world - 1):
        step(chunks[(rank - s - 1) % world], tmp)  # pass on a partial sum ...
        chunks[(rank - s - 2) % world] += tmp  # ... and add one from the left


def ring_all_gather(chunks: list) -> None:
    """n-1 steps; chunks[rank] is complete before, every chunk after."""
    for s in range(world - 1):
        step(chunks[(rank - s) % world], chunks[(rank - s - 1) % world])


def ring_all_reduce(buf: torch.Tensor) -> None:
    chunks = list(buf.chunk(world))  # views: the ring works in place
    ring_reduce_scatter(chunks)
    ring_all_gather(chunks)
# --8<-- [end:ring]


# --8<-- [start:check]
numel = world * (2**20 // world)  # about 2**20 float32, a multiple of n: equal chunks
g = torch.Generator().manual_seed(rank)
ints = torch.randint(-1000, 1000, (numel,), generator=g).float().to(device)
floats = torch.randn(numel, generator=g).to(device)
diffs = {}
for name, data in [("integer-valued data", ints), ("random floats", floats)]:
    ring, ref = data.clone(), data.clone()
    ring_all_reduce(ring)
    dist.all_reduce(ref)
    diffs[name] = (ring - ref).abs().max()
# the two halves on their own, against torch's reduce-scatter and all-gather
mine = torch.empty(numel // world, device=device)  # this rank's chunk of the sum
ref = torch.empty(numel, device=device)
rs, ag = ints.clone(), torch.zeros(numel, device=device)
ring_reduce_scatter(list(rs.chunk(world)))
reduce_scatter_single(mine, ints)
ag.chunk(world)[rank].copy_(mine)
ring_all_gather(list(ag.chunk(world)))
all_gather_single(ref, mine)
diffs["halves"] = torch.max((rs.chunk(world)[rank] - mine).abs().max(),
                            (ag - ref).abs().max())
for d in diffs.values():
    dist.all_reduce(d, op=dist.ReduceOp.MAX)  # the worst rank's difference
# --8<-- [end:check]

# --8<-- [start:count]
B = numel * 4  # bytes of one float32 buffer
counts = {}  # name -> (predicted bytes, counted bytes, predicted sends, counted sends)
for name, run, predicted, steps in [
    ("all-reduce", ring_all_reduce, 2 * (world - 1) * B // world, 2 * (world - 1)),
    ("reduce-scatter", lambda b: ring_reduce_scatter(list(b.chunk(world))),
     (world - 1) * B // world, world - 1),
    ("all-gather", lambda b: ring_all_gather(list(b.chunk(world))),
     (world - 1) * B // world, world - 1),
]:
    sent.update(bytes=0, sends=0)
    run(torch.ones(numel, device=device))
    counts[name] = (predicted, sent["bytes"], steps, sent["sends"])
every = [None] * world
dist.all_gather_object(every, counts)  # every rank's counts, checked on every rank
# --8<-- [end:count]

# --8<-- [start:report]
def sends(k: int) -> str:
    return f"{k:,} send{'s' * (k != 1)}"


def verdict(d: float, exact: bool) -> str:  # what the figure shows, computed from it
    if exact:
        return "(== 0: bit-identical)" if d == 0 else "(!= 0: NOT bit-identical)"
    return ("(< 1e-5: equal up to float32 round-off)" if d < 1e-5
            else "(>= 1e-5: NOT equal, more than round-off)")


if rank == 0:
    print(f"{world} ranks, buffer {numel:,} float32 = {B:,} B\n"
          f"  (divisible by n = {world}: chunks of {B // world:,} B)")
    for what in ("integer-valued data", "random floats"):
        d = diffs[what].item()
        print(f"max |ring - dist.all_reduce|, {what}: "
              f"{d:.1e}\n  {verdict(d, exact=what != 'random floats')}")
    d = diffs["halves"].item()
    print(f"max |ring - torch|, reduce-scatter and all-gather alone: "
          f"{d:.1e}\n  {verdict(d, exact=True)}")
    for name, (p, c, ps, cs) in counts.items():
        print(f"ring {name}, sent per rank: predicted {p:,} B, counted {c:,} B")
        print(f"ring {name}, sends per rank: "
              f"predicted {sends(ps)}, counted {sends(cs)}")
bad = [f"rank {r}, {name}: predicted {p:,} B in {sends(ps)}, "
       f"counted {c:,} B in {sends(cs)}"
       for r, got in enumerate(every) for name, (p, c, ps, cs) in got.items()
       if (p, ps) != (c, cs)]
bad += [f"max |ring - torch|, {k}: {v.item():.1e}" for k, v in diffs.items()
        if not (v < 1e-5 if k == "random floats" else v == 0)]
if bad:  # every rank says why: torchrun stops the others when one exits
    sys.exit("the ring disagrees with the formula or with torch:\n" + "\n".join(bad))
# --8<-- [end:report]

dist.destroy_process_group()
