"""Expert parallelism: a top-2 mixture-of-experts layer, its experts split over ranks,
tokens sent to them and back by all_to_all_single; equal to one process; the bytes
predicted from one process's routing and counted where they arrived.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 snippets/expert/moe.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--experts", type=int, default=4, help="E, experts in the layer")
E = parser.parse_args().experts
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/expert/moe.py")
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

# --8<-- [start:layer]
H, F, K, T = 8, 16, 2, 16  # hidden size, expert hidden size, experts per token, tokens
local = E // world  # experts per rank: rank r holds experts r*local .. r*local+local-1
torch.manual_seed(0)  # every rank draws the same full layer, then keeps its own experts
full = {"router": torch.randn(E, H) / H**0.5, "w1": torch.randn(E, H, F) / H**0.5,
        "w2": torch.randn(E, F, H) / F**0.5}


class MoE(nn.Module):
    def __init__(self, first, count):  # holds experts first .. first+count-1
        super().__init__()
        self.router = nn.Parameter(full["router"].clone())  # on every rank
        self.w1 = nn.Parameter(full["w1"][first:first + count].clone())
        self.w2 = nn.Parameter(full["w2"][first:first + count].clone())

    def experts(self, rows, counts):  # rows sorted by expert: counts[e] for expert e
        return torch.cat([torch.relu(x @ w1) @ w2 for x, w1, w2
                          in zip(rows.split(counts), self.w1, self.w2)])

    def forward(self, x, exchange=None):
        logits, chosen = (x @ self.router.T).topk(K)  # the K best experts of each token
        self.chosen = chosen
        weights = logits.softmax(-1)  # softmax over the chosen K, as Mixtral does
        order = chosen.flatten().argsort(stable=True)  # (token, expert) pairs by expert
        self.counts = torch.bincount(chosen.flatten(), minlength=E)  # rows per expert
        rows = x[order // K]  # without exchange (one process) every expert is here
        y = (exchange(self, rows, self.counts) if exchange
             else self.experts(rows, self.counts.tolist()))
        y = y * weights.flatten()[order, None]  # each result times its router weight
        return torch.zeros_like(x).index_add(0, order // K, y)  # summed per token
# --8<-- [end:layer]


# --8<-- [start:exchange]
arrived = {}  # bytes this rank's buffer received from each rank, by phase


def a2a(x, out_splits, in_splits, phase):
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
    got = [part.numel() * part.element_size() for part in out.split(out_splits)]
    arrived[phase] = [a + b for a, b in zip(arrived.get(phase, [0] * world), got)]
    return out


class AllToAll(torch.autograd.Function):  # the gradients go back the way the rows came
    @staticmethod
    def forward(ctx, x, out_splits, in_splits, phase):
        ctx.args = out_splits, in_splits, phase
        return a2a(x, out_splits, in_splits, phase)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits, phase = ctx.args
        return a2a(grad, in_splits, out_splits, f"{phase}, backward"), None, None, None


def exchange(layer, rows, counts):
    recv = torch.empty_like(counts)  # 1. the counts: how many rows each rank will send
    dist.all_to_all_single(recv, counts)  # for each of my experts (equal splits)
    recv = recv.view(world, local)  # [source rank, my expert]
    send_splits = counts.view(world, local).sum(1).tolist()  # rows to each rank
    recv_splits = recv.sum(1).tolist()  # rows from each rank
    got = AllToAll.apply(rows, recv_splits, send_splits, "dispatch")  # 2. the tokens
    mine = torch.arange(local, device=rows.device).repeat(world)  # which of my experts
    by_expert = mine.repeat_interleave(recv.flatten()).argsort(stable=True)
    y = layer.experts(got[by_expert], recv.sum(0).tolist())[by_expert.argsort()]
    return AllToAll.apply(y, send_splits, recv_splits, "return")  # 3. the results back
# --8<-- [end:exchange]

# --8<-- [start:check]
x_all, target = torch.randn(2, world * T, H, device=device)  # rank r: rows r*T..r*T+T-1
mine, ours = slice(rank * T, rank * T + T), slice(rank * local, rank * local + local)
ep = MoE(rank * local, local).to(device)  # expert parallel: this rank's experts only
x = x_all[mine].clone().requires_grad_()
out = ep(x, exchange)
(out * target[mine]).sum().backward()
dist.all_reduce(ep.router.grad)  # the router is replicated: sum its gradients (DDP)
one = MoE(0, E).to(device)  # the same layer in one process: all experts, all tokens
xo = x_all.clone().requires_grad_()
(one(xo) * target).sum().backward()
diffs = {"output": out - one(x_all)[mine], "input gradients": x.grad - xo.grad[mine],
         "expert gradients": torch.cat([(ep.w1.grad - one.w1.grad[ours]).flatten(),
                                        (ep.w2.grad - one.w2.grad[ours]).flatten()]),
         "router gradients (all-reduced)": ep.router.grad - one.router.grad}
# --8<-- [end:check]
# --8<-- [start:costs]
# predicted: from the one-process layer's routing (the rank of each chosen expert)
src = torch.arange(world * T, device=device)[:, None] // T  # the rank of each token
pairs = (src * world + one.chosen // local).flatten()  # (token's rank, expert's rank)
table = torch.bincount(pairs, minlength=world * world).view(world, world).tolist()
to_others = (sum(table[rank]) - table[rank][rank]) * H * 4  # my rows, others' experts
to_me = (sum(t[rank] for t in table) - table[rank][rank]) * H * 4  # others' rows, mine
# counted: what arrived from this rank in the other ranks' buffers
notes = [None] * world
dist.all_gather_object(notes, arrived)  # every rank's bytes received, by source
costs = {}
for phase, bytes_ in [("dispatch", to_others), ("return", to_me),  # backward: the
                      ("return, backward", to_others), ("dispatch, backward", to_me)]:
    counted = sum(n[phase][rank] for q, n in enumerate(notes) if q != rank)
    costs[f"bytes sent, {phase}"] = (bytes_, counted)  # other way round
failed = [what for what, (p, c) in costs.items() if p != c]
held = (ep.w1.numel() + ep.w2.numel()) * ep.w1.element_size()  # a shape, not a count
lines = [[f"rank {rank}, expert weights held: experts {list(range(E)[ours])} of {E},\n"
          f"  w1 {list(ep.w1.shape)} + w2 {list(ep.w2.shape)}, {held:,} B"] + [
    f"rank {rank}, {what}: predicted {p:,} B, counted {c:,} B"
    for what, (p, c) in costs.items()] for _ in range(world)]
dist.all_gather_object(lines, lines[0])  # rank 0 prints every rank's, in rank order
for what, d in diffs.items():
    dist.all_reduce(d := d.abs().max().reshape(1), op=dist.ReduceOp.MAX)  # all ranks'
    ok = d.item() < 1e-5
    lines.append([f"{what}: max abs diff {d.item():.1e} " + (
        "(< 1e-5: float32 round-off)" if ok else "(>= 1e-5: NOT as one process)")])
    failed += [] if ok else [what]
if rank == 0:
    print(f"{world} processes, {backend} on {device.type}, {E} experts, {local} per "
          f"rank, top-{K}\ntoken rows routed from rank (row) to rank (column): {table}",
          *(line for part in lines for line in part), sep="\n")
dist.destroy_process_group()
if failed:
    sys.exit(f"rank {rank}: predicted != counted or not equal to one process: {failed}")
# --8<-- [end:costs]
