"""The model of plan.py: Llama 2's blocks (attention and a SwiGLU MLP, each behind an
RMSNorm) and the part of the model one pipeline stage holds."""

import torch.nn.functional as F
from torch import nn

# --8<-- [start:model]
# Llama 2's shapes: config.json of meta-llama/Llama-2-7b-hf and Llama-2-70b-hf
LLAMA2 = {"7b": dict(dim=4096, layers=32, heads=32, kv=32, hidden=11008, vocab=32000),
          "70b": dict(dim=8192, layers=80, heads=64, kv=8, hidden=28672, vocab=32000)}


class Attention(nn.Module):  # rotary embeddings have no weights: left out
    def __init__(self, dim, heads, kv, **_):
        super().__init__()
        self.hd = dim // heads  # 128; 70B: 8 key/value heads for 64 query heads (GQA)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, o, bias=False) for o in (
            dim, kv * self.hd, kv * self.hd, dim))

    def forward(self, h):  # -1: as many heads as this rank has
        q, k, v = (w(h).unflatten(-1, (-1, self.hd)).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(a.transpose(1, 2).flatten(2))


class MLP(nn.Module):  # SwiGLU
    def __init__(self, dim, hidden, **_):
        super().__init__()
        self.w1, self.w3, self.w2 = (nn.Linear(i, o, bias=False) for i, o in (
            (dim, hidden), (dim, hidden), (hidden, dim)))

    def forward(self, h):
        return self.w2(F.silu(self.w1(h)) * self.w3(h))


class Block(nn.Module):  # pre-norm attention and MLP
    def __init__(self, **c):
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.RMSNorm(c["dim"]), nn.RMSNorm(c["dim"])
        self.attn, self.mlp = Attention(**c), MLP(**c)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Stage(nn.Module):  # one pipeline stage's layers (all of them if one stage)
    def __init__(self, c, stage, stages):
        super().__init__()
        n, last = c["layers"] // stages, stage == stages - 1
        s = n * stage  # its layers: s to s + n - 1
        self.embed = nn.Embedding(c["vocab"], c["dim"]) if stage == 0 else None
        self.layers = nn.ModuleDict({str(i): Block(**c) for i in range(s, s + n)})
        self.norm = nn.RMSNorm(c["dim"]) if last else None
        self.head = nn.Linear(c["dim"], c["vocab"], bias=False) if last else None

    def forward(self, x, targets):  # token ids, or the previous stage's activations
        x = self.embed(x) if self.embed is not None else x
        for block in self.layers.values():
            x = block(x)
        return x if self.head is None else F.cross_entropy(  # x: for the next stage
            self.head(self.norm(x)).flatten(0, 1), targets.flatten())
# --8<-- [end:model]
