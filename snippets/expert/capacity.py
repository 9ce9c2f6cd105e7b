"""Capacity factor, dropped tokens and the load-balancing loss of a top-2 router, for a
balanced and a skewed router, with a dispatch of fixed size over all_to_all_single.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/expert/capacity.py
"""

import argparse
import math
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--factor", type=float, default=1.25, help="capacity factor C")
C = parser.parse_args().factor
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/expert/capacity.py")
E, K, H, T = 4, 2, 8, 32  # experts, experts per token, hidden size, tokens per rank
if E % (n := int(os.environ["WORLD_SIZE"])):  # every rank holds E / n experts
    sys.exit(f"{E} experts do not split evenly over {n} processes"
             if os.environ["RANK"] == "0" else 2)
# The device rule of snippets/ddp/cost.py: NCCL only if each process has its own GPU,
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)
store, rank, world = next(dist.rendezvous("env://", timeout=timedelta(seconds=60)))
store.set(f"device/{rank}", str(torch.cuda.get_device_properties(device).uuid)
          if gpus else "cpu")
devices = set(store.multi_get([f"device/{r}" for r in range(world)]))
own = b"cpu" not in devices and len(devices) == world  # else gloo, on the CPU
backend, device = ("nccl", device) if own else ("gloo", torch.device("cpu"))
dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                        timeout=timedelta(seconds=60))
local = E // world

# --8<-- [start:route]
torch.manual_seed(0)  # the same router and all ranks' tokens on every rank
router = torch.randn(E, H, device=device) / H**0.5
x_all = torch.randn(world * T, H, device=device)  # rank r routes rows r*T .. r*T+T-1
capacity = math.ceil(C * T * K / E)  # slots per expert for one rank's tokens


def route(x, bias):
    logits = x @ router.T + bias
    return logits.softmax(-1), logits.topk(K).indices  # probabilities, the K chosen


def dispatch_buffer(x, chosen):  # [E, capacity, H]: each expert's first tokens
    pairs = chosen.T.flatten()  # every token's first choice, then every second choice
    token = torch.arange(len(x), device=x.device).repeat(K)
    onehot = F.one_hot(pairs, E)
    place = (onehot.cumsum(0) * onehot).sum(1) - 1  # its place in its expert's queue
    keep = place < capacity  # the rest is dropped: only the residual carries it
    buf = x.new_zeros(E, capacity, H)
    buf[pairs[keep], place[keep]] = x[token[keep]]
    return buf
# --8<-- [end:route]


def total(t):  # the sum over all ranks
    dist.all_reduce(t)
    return t


failed = []


def report(what, predicted, counted, unit):  # unit: "B", or a word in the singular
    p, c = (f"{n:,} {unit}" + ("" if n == 1 or unit == "B" else "s")
            for n in (predicted, counted))
    if rank == 0:
        print(f"{what}: predicted {p}, counted {c}")
    if predicted != counted:
        failed.append(what)


# --8<-- [start:dispatch]
class Arrivals(TorchDispatchMode):  # what the all-to-all op filled, from each rank
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.c10d.alltoall_base_.default:  # (output, input, group, ...)
            out, splits = args[0], args[3] or [len(args[0]) // world] * world
            self.bytes = [n * out[0].nbytes for n in splits]  # from rank 0, 1, ...
        return func(*args, **(kwargs or {}))


if rank == 0:
    print(f"{world} processes, {backend} on {device.type}, {E} experts, top-{K},\n  "
          f"{T} tokens per rank, capacity factor C = {C}")
mine = slice(rank * T, rank * T + T)
biases = {"balanced": [0.0] * E, "skewed": [2.0] + [0.0] * (E - 1)}  # added to logits
for name, bias in biases.items():
    bias = torch.tensor(bias, device=device)
    probs, chosen = route(x_all[mine], bias)
    counts = torch.bincount(chosen.flatten(), minlength=E)  # my rows for each expert
    buf = dispatch_buffer(x_all[mine], chosen)
    got = torch.empty_like(buf).view(world, local, -1, H)  # [source, my expert, slot]
    with Arrivals() as seen:  # equal splits: no sizes
        dist.all_to_all_single(got.view(-1, H), buf.view(-1, H))
    notes = [None] * world
    dist.all_gather_object(notes, seen.bytes)  # what each rank received, by source
    sent = sum(n[rank] for q, n in enumerate(notes) if q != rank)  # mine, elsewhere
    arrived = total((got.abs().sum(-1) != 0).sum())  # rows with a token: padding is 0
    dropped = total((counts - capacity).clamp(min=0).sum())  # from the counts alone
    per_expert = total(counts.clone())
    if rank == 0:
        print(f"{name} router: tokens per expert {per_expert.tolist()},\n  capacity "
              f"{capacity} per expert and rank, {arrived.item()} of "
              f"{world * E * capacity} slots filled")
    report(f"{name} router, tokens dropped", dropped.item(),
           world * T * K - arrived.item(), "token")
    report(f"{name} router, dispatch, sent per rank",  # padding included
           (world - 1) * local * math.ceil(C * T * K / E) * H * 4, sent, "B")
    # --8<-- [end:dispatch]
    # --8<-- [start:loss]
    f = per_expert / (world * T * K)  # share of the (token, expert) pairs per expert
    P = total(probs.sum(0)) / (world * T)  # mean router probability per expert
    loss = E * (f * P).sum()  # Switch Transformer's, without its weight alpha
    if rank == 0:
        print(f"{name} router: f = {[round(v, 3) for v in f.tolist()]},\n  "
              f"P = {[round(v, 3) for v in P.tolist()]}, E * sum(f * P) = {loss:.3f}")
    # --8<-- [end:loss]
    # --8<-- [start:one]
    probs_one, chosen_one = route(x_all, bias)  # one process, all tokens
    f_one = torch.bincount(chosen_one.flatten(), minlength=E) / (world * T * K)
    diff = (loss - E * (f_one * probs_one.mean(0)).sum()).abs().item()
    groups = torch.stack([dispatch_buffer(x_all[r * T:r * T + T], route(
        x_all[r * T:r * T + T], bias)[1]) for r in range(world)])  # a group per rank
    same = total((got - groups[:, rank * local:rank * local + local]).abs().max()
                 .reshape(1)).item()  # the slots my experts received, vs one process
    if rank == 0:
        print(f"{name} router vs one process: loss {diff:.1e} "
              + ("(< 1e-6: round-off)" if diff < 1e-6 else "(>= 1e-6: NOT equal)")
              + f",\n  slots at the experts {same:.1e} "
              + ("(== 0: bit-identical)" if same == 0 else "(> 0: NOT identical)"))
    failed += [] if diff < 1e-6 and same == 0 else [f"{name}: not as one process"]
    # --8<-- [end:one]
dist.destroy_process_group()
if failed:
    sys.exit(f"rank {rank}: predicted != counted or not equal to one process: {failed}")
