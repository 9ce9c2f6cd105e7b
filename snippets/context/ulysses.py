"""Ulysses-style context parallelism: q, k, v split by sequence position are re-split
by head with one all-to-all, each rank attends over the whole sequence for its own
heads, and a second all-to-all splits the output by position again; forward and
backward compared with full attention, the bytes of each all-to-all predicted and
counted.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 \
         snippets/context/ulysses.py [--causal]
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--causal", action="store_true",
                    help="each position sees only the past")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=4 snippets/context/ulysses.py")
B, H, S, D = 2, 4, 48, 8  # batch, heads, sequence length, head dimension
world = int(os.environ["WORLD_SIZE"])
if H % world or S % world:
    sys.exit(f"Ulysses gives each rank whole heads: {H} heads do not split over "
             f"{world} processes; run with a divisor of {H}"
             if os.environ["RANK"] == "0" else 2)
n, c = world, S // world  # processes, positions per rank

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
if not own:  # as for the other programs of this chapter: the CPU with gloo
    device = torch.device("cpu")
dist.init_process_group("nccl" if own else "gloo", store=store, rank=rank,
                        world_size=world, timeout=timeout)
if rank == 0:
    print(f"{n} processes, {gpus} GPUs here: {'nccl' if own else 'gloo'} on "
          f"{device.type}; {'causal' if args.causal else 'full'} attention")

# --8<-- [start:reshard]
moved = []  # bytes this rank sent to other ranks, one entry per all-to-all


def all_to_all(send: torch.Tensor) -> torch.Tensor:
    """send[j] goes to rank j; returns recv, recv[j] from rank j."""
    moved.append(sum(send[j].numel() * send.element_size()
                     for j in range(n) if j != rank))
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)  # splits dimension 0 into n equal parts
    return recv


def seq_to_heads(x):  # (b, H, c, D): my positions, all heads -> (b, H/n, S, D)
    b = x.shape[0]
    send = x.reshape(b, n, H // n, c, D).transpose(0, 1).contiguous()  # by head group
    return all_to_all(send).permute(1, 2, 0, 3, 4).reshape(b, H // n, S, D)


def heads_to_seq(y):  # (b, H/n, S, D): my heads, all positions -> (b, H, c, D)
    b = y.shape[0]
    send = y.reshape(b, H // n, n, c, D).permute(2, 0, 1, 3, 4)  # by position
    send = send.contiguous()
    return all_to_all(send).transpose(0, 1).reshape(b, H, c, D)


class SeqToHeads(torch.autograd.Function):  # the gradient goes back the other way
    forward = staticmethod(lambda ctx, x: seq_to_heads(x))
    backward = staticmethod(lambda ctx, g: heads_to_seq(g))


class HeadsToSeq(torch.autograd.Function):
    forward = staticmethod(lambda ctx, y: heads_to_seq(y))
    backward = staticmethod(lambda ctx, g: seq_to_heads(g))
# --8<-- [end:reshard]


# --8<-- [start:attention]
def ulysses_attention(q, k, v):  # each (B, H, c, D): this rank's positions
    qkv = SeqToHeads.apply(torch.cat([q, k, v]))  # one all-to-all for all three
    q_h, k_h, v_h = qkv.chunk(3)  # (B, H/n, S, D): every position, my heads
    out = F.scaled_dot_product_attention(q_h, k_h, v_h, is_causal=args.causal)
    return HeadsToSeq.apply(out)  # (B, H, c, D): my positions again
# --8<-- [end:attention]


# --8<-- [start:check]
torch.manual_seed(0)  # the same tensors on every rank; each keeps its own positions
q, k, v, dout = torch.randn(4, B, H, S, D, dtype=torch.float64, device=device)
full = [t.clone().requires_grad_() for t in (q, k, v)]
ref = F.scaled_dot_product_attention(*full, is_causal=args.causal)
ref.backward(dout)
mine = slice(rank * c, (rank + 1) * c)
local = [t[:, :, mine].clone().requires_grad_() for t in (q, k, v)]
out = ulysses_attention(*local)
forward = len(moved)
out.backward(dout[:, :, mine])
diff = max((a - b[:, :, mine]).abs().max() for a, b in
           [(out, ref)] + [(t.grad, f.grad) for t, f in zip(local, full)])
dist.all_reduce(diff, op=dist.ReduceOp.MAX)  # the worst rank's
# --8<-- [end:check]

# --8<-- [start:report]
shard = B * H * c * D * 8  # bytes of one of q, k, v or out on one rank, float64
part = shard // n  # the part of it each other rank gets: its heads of my positions
costs = [  # what, predicted, counted, unit
    ("all-to-all of q, k, v, bytes per rank", 3 * (n - 1) * part, moved[0], "B"),
    ("all-to-all of the output, bytes per rank", (n - 1) * part, moved[1], "B"),
    ("all-to-alls per forward", 2, forward, "calls"),
    ("bytes each rank sends per backward", 4 * (n - 1) * part, sum(moved[forward:]),
     "B")]
if rank == 0:  # the verdict says what the figure shows
    verdict = ("< 1e-12: equal up to float64 round-off" if diff < 1e-12
               else ">= 1e-12: NOT equal, more than round-off")
    print(f"{S} positions, {c} per rank; {H} heads, {H // n} per rank\nmax |Ulysses - "
          f"full attention|, output and gradients: {diff.item():.1e}\n  ({verdict})")
    for what, predicted, counted, unit in costs:
        print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    print(f"for comparison, ring attention on these shapes: (n-1) K/V blocks =\n  "
          f"{(n - 1) * 2 * shard:,} B per rank and forward, against "
          f"{4 * (n - 1) * part:,} B")
failed = [what for what, predicted, counted, _ in costs if predicted != counted]
dist.destroy_process_group()
if failed or not diff < 1e-12:
    sys.exit(f"predicted != counted or Ulysses != full attention: {', '.join(failed)}")
# --8<-- [end:report]
