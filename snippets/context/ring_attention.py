"""Ring attention by hand: the sequence split across ranks, key/value blocks passed
around a ring with send/recv, partial results merged by log-sum-exp; forward and
backward compared with full attention, the bytes sent predicted and counted, what the
function saves for backward measured.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 \
         snippets/context/ring_attention.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=4 snippets/context/ring_attention.py")
B, H, S, D = 2, 4, 48, 8  # batch, heads, sequence length, head dimension
world = int(os.environ["WORLD_SIZE"])
if world < 2 or S % world:
    sys.exit(f"run with a divisor of {S} from 2 to {S} processes (a ring of equal "
             f"blocks), not {world}" if os.environ["RANK"] == "0" else 2)
c = S // world  # positions per rank
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
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        timeout=timeout)
if rank == 0:
    print(f"{world} processes, {gpus} GPUs here: {backend} on {device.type}")

# --8<-- [start:forward]
right, left = (rank + 1) % world, (rank - 1) % world
sent = []  # the bytes of each buffer this rank handed to isend


def pass_on(buf: torch.Tensor):
    """Send buf to the right, receive the left neighbour's; returns wait()."""
    sent.append(buf.numel() * buf.element_size())
    into = torch.empty_like(buf)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, right),
                                   dist.P2POp(dist.irecv, into, left)])

    def wait() -> torch.Tensor:  # the left neighbour's buffer, once it has arrived
        for r in reqs:
            r.wait()
        return into
    return wait


def ring_forward(q, k, v):
    out, lse = torch.zeros_like(q), torch.full_like(q[..., :1], float("-inf"))
    kv = torch.cat([k, v])  # one buffer: one send per step
    for i in range(world):  # at step i we hold the block of rank (rank - i) % world
        # start passing this block on before computing with it; not after the last step
        arrived = pass_on(kv) if i < world - 1 else lambda: kv
        k_i, v_i = kv.chunk(2)
        s = q @ k_i.transpose(-2, -1) * D**-0.5
        # this block's log-sum-exp joins the previous blocks': rescale, then add
        new = torch.logaddexp(lse, torch.logsumexp(s, dim=-1, keepdim=True))
        out, lse = out * torch.exp(lse - new) + torch.exp(s - new) @ v_i, new
        kv = arrived()
    return out, lse
# --8<-- [end:forward]


# --8<-- [start:backward]
def ring_backward(dout, q, k, v, out, lse):
    """Each key/value block travels with its gradients; they end at its owner."""
    dq, delta = torch.zeros_like(q), (dout * out).sum(-1, keepdim=True)
    buf = torch.cat([k, v, torch.zeros_like(k), torch.zeros_like(v)])
    for i in range(world):
        k_i, v_i, dk_i, dv_i = buf.chunk(4)
        p = torch.exp(q @ k_i.transpose(-2, -1) * D**-0.5 - lse)  # softmax, from lse
        dv_i += p.transpose(-2, -1) @ dout
        ds = p * (dout @ v_i.transpose(-2, -1) - delta) * D**-0.5
        dq += ds @ k_i
        dk_i += ds.transpose(-2, -1) @ q
        buf = pass_on(buf if i < world - 1 else buf[2 * B:])()  # gradients ride along
    return dq, *buf.chunk(2)  # after n passes: dK, dV of this rank's own blocks


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        out, lse = ring_forward(q, k, v)
        ctx.save_for_backward(q, k, v, out, lse)  # all of them s/n positions long
        return out

    @staticmethod
    def backward(ctx, dout):
        return ring_backward(dout, *ctx.saved_tensors)
# --8<-- [end:backward]


# --8<-- [start:check]
torch.manual_seed(0)  # the same tensors on every rank; each keeps its own block
q, k, v, dout = torch.randn(4, B, H, S, D, dtype=torch.float64, device=device)
full = [t.clone().requires_grad_() for t in (q, k, v)]
ref = torch.nn.functional.scaled_dot_product_attention(*full)
ref.backward(dout)
mine = slice(rank * c, (rank + 1) * c)  # positions rank*c ... (rank+1)*c - 1
local = [t[:, :, mine].clone().requires_grad_() for t in (q, k, v)]
kept = []  # what autograd keeps for backward, on this rank: what the function saves
with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t,
                                              lambda t: t):
    out = RingAttention.apply(*local)
fwd = len(sent)  # the sends of forward; the rest are backward's
out.backward(dout[:, :, mine])
diff = max((a - b[:, :, mine]).abs().max() for a, b in
           [(out, ref)] + [(t.grad, f.grad) for t, f in zip(local, full)])
dist.all_reduce(diff, op=dist.ReduceOp.MAX)  # the worst rank's
# --8<-- [end:check]

# --8<-- [start:report]
blk = B * H * c * D * 8  # bytes of one key or value block, float64
n = world  # forward: n - 1 passes of K, V; backward: n - 1 of K, V, dK, dV, then dK, dV
costs = [  # what, predicted, counted, unit (singular)
    ("K/V bytes each rank sends per forward", (n - 1) * 2 * blk, sum(sent[:fwd]), "B"),
    ("sends per forward", n - 1, fwd, "send"),
    ("K, V, dK, dV bytes sent per backward",
     (n - 1) * 4 * blk + 2 * blk, sum(sent[fwd:]), "B"),
    ("sends per backward", n, len(sent) - fwd, "send")]
saved = sum(t.numel() * t.element_size() for t in kept)  # what save_for_backward got
ok = diff.item() < 1e-12
if rank == 0:
    print(f"{S} positions, {c} per rank\nmax |ring - full attention|, output and "
          f"gradients: {diff.item():.1e}\n  "
          + ("(< 1e-12: equal up to float64 round-off)" if ok
             else "(>= 1e-12: NOT equal)"))
    for what, predicted, counted, unit in costs:
        p, k = (f"{x:,} {unit}" + ("" if x == 1 or unit == "B" else "s")
                for x in (predicted, counted))
        print(f"{what}: predicted {p}, counted {k}")
    print(f"saved for backward on each rank: {len(kept)} tensors\n"
          f"  (q, k, v, out, lse of {c} positions), {saved:,} B")
failed = [what for what, predicted, counted, _ in costs if predicted != counted]
dist.destroy_process_group()
if failed or not ok:
    sys.exit(f"predicted != counted or ring != full attention: {', '.join(failed)}")
# --8<-- [end:report]
