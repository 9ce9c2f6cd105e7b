"""Causal ring attention, two ways to split the sequence: contiguous blocks, where the
last rank computes the most, and zig-zag, where every rank computes the same; work per
rank predicted and counted, the result of both compared with full causal attention.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 \
         snippets/context/zigzag.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=4 snippets/context/zigzag.py")
B, H, S, D = 2, 4, 48, 8  # batch, heads, sequence length, head dimension
world = int(os.environ["WORLD_SIZE"])
if world < 2 or S % (2 * world):
    sys.exit(f"run with 2, 3, 4, 6, 8, 12 or 24 processes (a ring, and 2 equal chunks "
             f"per rank of the {S} positions), not {world}"
             if os.environ["RANK"] == "0" else 2)

local_rank = int(os.environ["LOCAL_RANK"])
gpus = torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)
timeout = timedelta(seconds=60)  # the device rule of the DDP chapter, by GPU UUID
store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
own = b"cpu" not in devices and len(devices) == world  # a GPU of its own each: NCCL
if not own:  # gloo's send/recv fail on CUDA tensors ('Bad address'): use the CPU
    device = torch.device("cpu")
dist.init_process_group("nccl" if own else "gloo", store=store, rank=rank,
                        world_size=world, timeout=timeout)
n, t = world, S // (2 * world)  # 2n chunks of t positions each
if rank == 0:
    print(f"{n} processes, {gpus} GPUs here: {'nccl' if own else 'gloo'} on "
          f"{device.type}; {S} positions in {2 * n} chunks of {t}")

# --8<-- [start:splits]
SPLITS = {  # the two chunks each rank holds: chunk j is positions j*t ... j*t + t - 1
    "contiguous": lambda r: [2 * r, 2 * r + 1],
    "zig-zag": lambda r: [r, 2 * n - 1 - r],
}
PREDICTED = {  # chunk pairs (query chunk a, key chunk j <= a) a rank computes
    "contiguous": lambda r: (2 * r + 1) + (2 * r + 2),
    "zig-zag": lambda r: (r + 1) + (2 * n - r),  # = 2n + 1 on every rank
}
# --8<-- [end:splits]


# --8<-- [start:ring]
def causal_ring(q, k, v, chunks_of):
    """q, k, v: this rank's two chunks, side by side. Returns the output, pairs done."""
    mine, pairs = chunks_of(rank), 0
    qs = q.chunk(2, dim=2)
    out = [torch.zeros_like(x) for x in qs]
    lse = [torch.full_like(x[..., :1], float("-inf")) for x in qs]
    kv = torch.cat([k, v])
    for i in range(n):
        if i < n - 1:  # pass the block on while computing with it
            into = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, kv, (rank + 1) % n),
                dist.P2POp(dist.irecv, into, (rank - 1) % n)])
        theirs = chunks_of((rank - i) % n)  # the chunks of the block we hold now
        k_i, v_i = kv.chunk(2)
        for qa, a in enumerate(mine):
            for j, kj, vj in zip(theirs, k_i.chunk(2, dim=2), v_i.chunk(2, dim=2)):
                if j > a:
                    continue  # entirely in the future of chunk a: masked, skipped
                s = qs[qa] @ kj.transpose(-2, -1) * D**-0.5
                if j == a:  # the diagonal pair: half of it is masked
                    s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool,
                                                             device=device).tril(),
                                      float("-inf"))
                new = torch.logaddexp(lse[qa], torch.logsumexp(s, -1, keepdim=True))
                out[qa] = out[qa] * torch.exp(lse[qa] - new) + torch.exp(s - new) @ vj
                lse[qa], pairs = new, pairs + 1
        if i < n - 1:
            for r in reqs:
                r.wait()
            kv = into
    return torch.cat(out, dim=2), pairs
# --8<-- [end:ring]


# --8<-- [start:check]
torch.manual_seed(0)  # the same tensors on every rank; each keeps its own chunks
q, k, v = torch.randn(3, B, H, S, D, dtype=torch.float64, device=device)
ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
failed, diffs, counts = [], {}, {}
for name, chunks_of in SPLITS.items():
    idx = torch.cat([torch.arange(j * t, (j + 1) * t) for j in chunks_of(rank)])
    out, pairs = causal_ring(*(x[:, :, idx] for x in (q, k, v)), chunks_of)
    diffs[name] = (out - ref[:, :, idx]).abs().max()
    dist.all_reduce(diffs[name], op=dist.ReduceOp.MAX)  # the worst rank's
    every = [None] * n
    dist.all_gather_object(every, pairs)
    counts[name] = every
# --8<-- [end:check]

# --8<-- [start:report]
if rank == 0:
    print("chunk pairs each rank computes (the positions it holds):")
for name, chunks_of in SPLITS.items():
    for r, counted in enumerate(counts[name]):
        predicted = PREDICTED[name](r)
        if rank == 0:
            held = " and ".join(f"{j * t}-{j * t + t - 1}" for j in chunks_of(r))
            print(f"{name}, rank {r} ({held}): "
                  f"predicted {predicted:,} pairs, counted {counted:,} pairs")
        if predicted != counted:
            failed.append(f"{name}, rank {r}")
    if rank == 0:  # the verdict says what the figure shows
        ratio = max(counts[name]) * n / sum(counts[name])
        verdict = ("< 1e-12: equal up to float64 round-off" if diffs[name] < 1e-12
                   else ">= 1e-12: NOT equal, more than round-off")
        print(f"{name}: slowest rank / mean = {ratio:.2f}; max |ring - full causal "
              f"attention|\n  {diffs[name].item():.1e} ({verdict})")
dist.destroy_process_group()
if failed or not all(d < 1e-12 for d in diffs.values()):
    sys.exit(f"predicted != counted or ring != full attention: {', '.join(failed)}")
# --8<-- [end:report]
