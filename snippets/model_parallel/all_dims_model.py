"""The model of all_dims.py: a small transformer whose blocks hold attention (its heads
split by tensor parallelism, its sequence by context parallelism) and a top-2 mixture
of experts (its experts split by expert parallelism). Without groups set, it is the
plain model one process runs."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

D, HEADS, FF, E, K, LAYERS = 16, 4, 8, 8, 2, 4  # width, heads, expert hidden size,
# experts, experts per token, blocks
# torch 2.13 deprecates the old names; older releases have only those
all_gather_single = (getattr(dist, "all_gather_single", None)
                     or dist.all_gather_into_tensor)
reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                         or dist.reduce_scatter_tensor)


# --8<-- [start:attention]
class GatherSeq(torch.autograd.Function):
    """Context parallelism: all-gather the keys and values of every position in
    forward; their gradients go back to the rank of each position, reduce-scattered."""

    @staticmethod
    def forward(ctx, kv, group):  # kv: (positions of this rank, ...)
        ctx.group, n = group, dist.get_world_size(group)
        out = kv.new_empty((n * kv.shape[0], *kv.shape[1:]))
        all_gather_single(out, kv.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_empty((grad.shape[0] // ctx.group.size(), *grad.shape[1:]))
        reduce_scatter_single(out, grad.contiguous(), group=ctx.group)
        return out, None


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False)
                                              for _ in range(4))
        self.cp = None  # the context-parallel group, if any

    def forward(self, x):  # x: (sequences, positions of this rank, D)
        b, s, _ = x.shape  # -1: the heads of this tp rank (all of them without TP)
        q, k, v = (w(x).view(b, s, -1, D // HEADS).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        if self.cp is not None:  # positions first, gathered, then back in place
            kv = GatherSeq.apply(torch.stack([k, v]).permute(3, 0, 1, 2, 4), self.cp)
            k, v = kv.permute(1, 2, 3, 0, 4)
        out = F.scaled_dot_product_attention(q, k, v)  # every position sees all
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))
# --8<-- [end:attention]


# --8<-- [start:moe]
def a2a(x, out_splits, in_splits, group):
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


class AllToAll(torch.autograd.Function):  # gradients go back the way the rows came
    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.args = in_splits, out_splits, group
        return a2a(x, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx, grad):
        return a2a(grad, *ctx.args), None, None, None


class MoE(nn.Module):  # as snippets/expert/moe.py, on a group of the mesh
    def __init__(self):
        super().__init__()
        self.router = nn.Parameter(torch.randn(E, D) / D**0.5)
        self.w1 = nn.Parameter(torch.randn(E, D, FF) / D**0.5)
        self.w2 = nn.Parameter(torch.randn(E, FF, D) / FF**0.5)
        self.ep = None  # the expert-parallel group, if any

    def keep(self, group):  # expert parallelism: keep only this rank's experts
        self.ep, n, r = group, group.size(), group.rank()
        mine = slice(r * E // n, (r + 1) * E // n)
        self.w1, self.w2 = (nn.Parameter(w.detach()[mine].clone())
                            for w in (self.w1, self.w2))

    def experts(self, rows, counts):  # rows sorted by expert: counts[e] for expert e
        return torch.cat([torch.relu(x @ w1) @ w2 for x, w1, w2
                          in zip(rows.split(counts), self.w1, self.w2)])

    def exchange(self, rows, counts):  # send each row to the rank of its expert
        n, local = self.ep.size(), E // self.ep.size()
        recv = torch.empty_like(counts)  # how many rows each rank sends my experts
        dist.all_to_all_single(recv, counts, group=self.ep)
        recv = recv.view(n, local)  # [source rank, my expert]
        send_splits = counts.view(n, local).sum(1).tolist()
        recv_splits = recv.sum(1).tolist()
        got = AllToAll.apply(rows, recv_splits, send_splits, self.ep)
        mine = torch.arange(local).repeat(n).repeat_interleave(recv.flatten())
        by_expert = mine.argsort(stable=True)
        y = self.experts(got[by_expert], recv.sum(0).tolist())[by_expert.argsort()]
        return AllToAll.apply(y, send_splits, recv_splits, self.ep)

    def forward(self, x):
        shape, x = x.shape, x.reshape(-1, D)
        logits, self.chosen = (x @ self.router.T).topk(K)  # each token's K experts
        weights = logits.softmax(-1)
        order = self.chosen.flatten().argsort(stable=True)  # (token, expert) by expert
        counts = torch.bincount(self.chosen.flatten(), minlength=E)
        rows = x[order // K]
        y = (self.exchange(rows, counts) if self.ep is not None
             else self.experts(rows, counts.tolist()))
        y = y * weights.flatten()[order, None]
        return torch.zeros_like(x).index_add(0, order // K, y).view(shape)
# --8<-- [end:moe]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.moe = Attention(), MoE()

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.moe(x)


class Blocks(nn.Module):  # the whole model, or the blocks of one pipeline stage
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
