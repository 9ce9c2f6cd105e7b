"""MoE as it is run now: each token sent once to each rank that holds one of its experts
(not once per expert), the experts run as grouped GEMMs, a shared expert computed while
the tokens travel; equal to one process; the bytes of both dispatches counted.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 snippets/expert/dedup.py
"""

import os
import sys
from datetime import timedelta
from itertools import groupby

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun "
             "--standalone --nproc-per-node=2 snippets/expert/dedup.py")
E, K, H, FF, T = 8, 4, 16, 32, 32  # experts, per token, hidden, expert hidden, tokens
if E % (n := int(os.environ["WORLD_SIZE"])):  # every rank holds E / n experts
    sys.exit(f"{E} experts do not split evenly over {n} processes"
             if os.environ["RANK"] == "0" else 2)
dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # tokens on the CPU
rank, world = dist.get_rank(), dist.get_world_size()
local = E // world

# --8<-- [start:layer]
torch.manual_seed(0)  # every rank draws the whole layer, then keeps its own experts
full = {"router": torch.randn(E, H) / H**0.5, "w1": torch.randn(E, FF, H) / H**0.5,
        "w3": torch.randn(E, FF, H) / H**0.5, "w2": torch.randn(E, H, FF) / FF**0.5,
        "shared": [torch.randn(FF, H) / H**0.5, torch.randn(FF, H) / H**0.5,
                   torch.randn(H, FF) / FF**0.5]}  # one shared expert: w1, w3, w2


def swiglu(x, w1, w3, w2):  # one expert, SwiGLU: three matrices
    return (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def grouped(x, counts, w1, w3, w2):  # rows sorted by expert, one call per matrix
    offs = counts.cumsum(0).to(torch.int32)  # where each expert's rows end
    h = F.silu(torch._grouped_mm(x, w1.mT, offs=offs))
    return torch._grouped_mm(h * torch._grouped_mm(x, w3.mT, offs=offs), w2.mT,
                             offs=offs)


class MoE(torch.nn.Module):
    def __init__(self, first, count):  # routed experts first .. first+count-1
        super().__init__()
        P = torch.nn.Parameter
        self.router = P(full["router"].clone())  # replicated, like the shared expert
        self.shared = torch.nn.ParameterList([P(w.clone()) for w in full["shared"]])
        self.w = torch.nn.ParameterList(
            [P(full[k][first:first + count].clone()) for k in ("w1", "w3", "w2")])

    def route(self, x):
        logits, chosen = (x @ self.router.T).topk(K)
        self.chosen = chosen
        return chosen, logits.softmax(-1)  # the K experts and their weights

    def forward(self, x):  # one process: every expert here, a loop over experts
        chosen, weights = self.route(x)
        y = swiglu(x, *self.shared)  # the shared expert sees every token
        for e in range(E):
            tok, k = (chosen == e).nonzero(as_tuple=True)
            y = y.index_add(0, tok, weights[tok, k, None] * swiglu(
                x[tok], *(w[e] for w in self.w)))
        return y
# --8<-- [end:layer]


# --8<-- [start:dispatch]
def a2a(x, out_splits, in_splits):  # torch's functional all-to-all: autograd, async
    return funcol.all_to_all_single(x, out_splits, in_splits, dist.group.WORLD)


def ep_forward(layer, x, dedup):
    chosen, weights = layer.route(x)
    owner = chosen // local  # the rank of each chosen expert
    gate = torch.zeros(len(x), world, local).index_put(  # weight per (token, rank,
        (torch.arange(len(x))[:, None], owner, chosen % local), weights)  # expert)
    if dedup:  # one row per (token, rank): a token goes once to each rank it needs
        tok, dst = gate.ne(0).any(-1).nonzero(as_tuple=True)
        gates = gate[tok, dst]  # [rows, local]: its weights for that rank's experts
    else:  # one row per (token, expert), as in moe.py
        tok, k = torch.ones_like(chosen).nonzero(as_tuple=True)
        dst = owner[tok, k]
        gates = gate[tok, dst] * F.one_hot(chosen[tok, k] % local, local)
    order = dst.argsort(stable=True)  # rows grouped by destination rank
    tok, gates = tok[order], gates[order]
    send = torch.bincount(dst, minlength=world)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)  # how many rows come from each rank
    send, recv = send.tolist(), recv.tolist()
    got_x = a2a(x[tok], recv, send)  # the tokens go out...
    got_g = a2a(gates, recv, send)  # ...with their router weights
    y = swiglu(x, *layer.shared)  # ...and the shared expert runs while they travel
    got_x, got_g = got_x.wait(), got_g.wait()
    row, e = got_g.ne(0).nonzero(as_tuple=True)  # expand: a row per local expert
    by_e = e.argsort(stable=True)
    row, e = row[by_e], e[by_e]
    out = grouped(got_x[row], torch.bincount(e, minlength=local), *layer.w)
    out = torch.zeros_like(got_x).index_add(0, row, out * got_g[row, e, None])
    return y.index_add(0, tok, a2a(out, send, recv).wait())  # one row back per row
# --8<-- [end:dispatch]


# --8<-- [start:count]
class Arrivals(TorchDispatchMode):  # bytes each all-to-all's output got, by source
    def __init__(self):
        super().__init__()
        self.calls, self.order = [], []  # and the order of the ops that matter here

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops._c10d_functional.all_to_all_single.default:
            row = out[0].nbytes if len(out) else 0  # args: input, out splits, in splits
            self.calls.append([n * row for n in args[1]])
        if (name := func.__name__.split(".")[0]) in (
                "all_to_all_single", "wait_tensor", "mm", "_grouped_mm"):
            self.order.append(name)
        return out
# --8<-- [end:count]


# --8<-- [start:check]
x_all, target = torch.randn(2, world * T, H)  # rank r: rows r*T .. r*T+T-1
mine = slice(rank * T, rank * T + T)
one = MoE(0, E)  # the whole layer in one process: all experts, all tokens
xo = x_all.clone().requires_grad_()
(one(xo) * target).sum().backward()
ours = slice(rank * local, rank * local + local)
failed, lines = [], []


def rel(a, b):  # max abs difference relative to the reference's largest value
    return ((a - b).abs().max() / b.abs().max()).reshape(1)


for dedup in (False, True):
    ep = MoE(rank * local, local)  # this rank's routed experts only
    x = x_all[mine].clone().requires_grad_()
    with Arrivals() as seen:
        out = ep_forward(ep, x, dedup)
    (out * target[mine]).sum().backward()
    for p in [ep.router, *ep.shared]:  # replicated: sum the gradients (DDP)
        dist.all_reduce(p.grad)
    d = torch.cat([rel(out, one(x_all)[mine]), rel(x.grad, xo.grad[mine])] + [
        rel(p.grad, q.grad[ours]) for p, q in zip(ep.w, one.w)] + [
        rel(p.grad, q.grad) for p, q in zip([ep.router, *ep.shared],
                                            [one.router, *one.shared])]).max()
    dist.all_reduce(d, op=dist.ReduceOp.MAX)
    name = "per rank" if dedup else "per expert"
    if dedup:  # the shared expert's matmuls between sending the tokens and waiting
        ops = [f"{op} x{len(list(n))}" for op, n in groupby(seen.order)]
        lines.append(f"{name}, forward, ops in order: " + ", ".join(ops[:3]) + ",\n  "
                     + ", ".join(ops[3:]))
    ok = d.item() < 1e-5
    lines.append(f"{name} vs one process: max rel diff {d.item():.1e} "
                 + ("(< 1e-5: float32 round-off)" if ok else "(>= 1e-5: NOT equal)"))
    failed += [] if ok else [f"{name}: not as one process"]
    # --8<-- [end:check]
    # --8<-- [start:costs]
    # predicted: from the one-process layer's routing, the ranks each token needs
    src = torch.arange(world * T)[:, None] // T  # the rank of each token
    dst = one.chosen // local  # the rank of each of its K experts
    if dedup:
        need = F.one_hot(dst, world).amax(1)  # [token, rank]: 1 if it needs that rank
        rows = (need.sum() - need.gather(1, src).sum()).item()  # distinct, not mine
    else:
        rows = (dst != src).sum().item()  # every (token, expert) pair elsewhere
    # counted: what arrived from the other ranks, summed over all ranks
    got = torch.tensor([sum(b for q, b in enumerate(c) if q != rank)
                        for c in seen.calls])  # tokens, weights, results back
    dist.all_reduce(got)
    for what, p, c in [("token rows out", rows * H * 4, got[0]),
                       ("results back", rows * H * 4, got[2])] + [
            ("router weights with them", rows * local * 4, got[1])] * dedup:
        lines.append(f"{name}, {what}: predicted {p:,} B, counted {c.item():,} B")
        failed += [] if p == c else [f"{name}, {what}"]
if rank == 0:
    print(f"{world} processes, gloo on cpu, {E} experts ({local} per rank), top-{K}, "
          f"a shared expert,\n  {world * T} tokens, H = {H} float32", *lines, sep="\n")
dist.destroy_process_group()
if failed:
    sys.exit(f"rank {rank}: predicted != counted or not equal to one process: {failed}")
# --8<-- [end:costs]
