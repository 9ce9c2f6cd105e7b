"""Small decoder layers of the shapes people train now, for the programs beside this
file: a Llama-shaped layer (RMSNorm, RoPE, grouped-query attention, a SwiGLU MLP, no
dropout, no biases), a DeepSeek-shaped mixture of experts (routed top-k experts and
shared experts) and, for comparison, a GPT-3 block (LayerNorm, GeLU MLP of 4h, dropout).
"""

import torch
import torch.nn.functional as F
from torch import nn


# --8<-- [start:layer]
def rope(x, cos, sin):  # rotate each pair (x1, x2) of a head by its position's angle
    x1, x2 = x.chunk(2, dim=-1)  # x: (b, s, heads, d); cos, sin: (s, d / 2)
    cos, sin = cos[:, None], sin[:, None]  # one angle per position, for every head
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):  # grouped-query: kv_heads < heads share K and V
    def __init__(self, h, heads, kv_heads, bias=False):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, h // heads
        self.q = nn.Linear(h, heads * self.d, bias=bias)
        self.k = nn.Linear(h, kv_heads * self.d, bias=bias)
        self.v = nn.Linear(h, kv_heads * self.d, bias=bias)
        self.o = nn.Linear(heads * self.d, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q, k, v = (m(x).view(b, s, -1, self.d) for m in (self.q, self.k, self.v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)  # before the transpose (torchtitan)
        a = F.scaled_dot_product_attention(  # each K/V head serves heads/kv_heads
            *(t.transpose(1, 2) for t in (q, k, v)),  # (b, heads, s, d)
            is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.o(a.transpose(1, 2).reshape(b, s, -1))  # a view: no copy


class SwiGLU(nn.Module):  # w2(silu(w1 x) * w3 x): three matrices of h x F
    def __init__(self, h, f):
        super().__init__()
        self.w1, self.w3 = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):  # DeepSeek-shaped: top-k of E routed experts, plus shared ones
    def __init__(self, h, f, experts, k, shared):
        super().__init__()
        self.k, self.router = k, nn.Linear(h, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(h, f) for _ in range(experts))
        self.shared = SwiGLU(h, shared * f)  # the shared experts as one wider MLP

    def forward(self, x):
        t = x.reshape(-1, x.shape[-1])  # tokens
        w, e = torch.sigmoid(self.router(t)).topk(self.k, dim=-1)  # scores, experts
        w = w / w.sum(-1, keepdim=True)  # the k weights of a token sum to 1
        out = self.shared(t)
        for i, expert in enumerate(self.experts):
            tok, slot = (e == i).nonzero(as_tuple=True)  # tokens routed to expert i
            out = out.index_add(0, tok, expert(t[tok]) * w[tok, slot, None])
        return out.view_as(x)


class Layer(nn.Module):  # pre-norm: x + attn(norm(x)), then + mlp(norm(x))
    def __init__(self, h, heads, kv_heads, f, moe=None, bias=False):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.attn = Attention(h, heads, kv_heads, bias)
        self.mlp = MoE(h, f, *moe) if moe else SwiGLU(h, f)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):  # embedding, L layers, a final norm, the output head
    def __init__(self, vocab, h, layers, heads, kv_heads, f, moe=None, tied=False,
                 bias=False, seq=4096):
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(Layer(h, heads, kv_heads, f, moe, bias)
                                    for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(h), nn.Linear(h, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight  # one matrix for both
        d = h // heads  # RoPE's angles: buffers, not parameters
        angle = torch.outer(torch.arange(seq), 10000.0 ** (-torch.arange(0, d, 2) / d))
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def forward(self, tokens):
        s, x = tokens.shape[1], self.embed(tokens)
        for layer in self.layers:  # the angles' first s rows, views of the buffers
            x = layer(x, self.cos[:s], self.sin[:s])
        return self.head(self.norm(x))
# --8<-- [end:layer]


# --8<-- [start:formula]
def attention(h, heads, kv_heads, bias=False):  # q and o: h x h; k and v: h x h_kv
    d = h // heads
    return 2 * h * heads * d + 2 * h * kv_heads * d + bias * (heads + 2 * kv_heads) * d


def swiglu(h, f):  # w1, w3: h x F; w2: F x h
    return 3 * h * f


def moe(h, f, experts, k, shared):  # routed experts, shared ones, the router
    return experts * swiglu(h, f) + swiglu(h, shared * f) + h * experts


def model(vocab, h, layers, attn, mlp, tied):  # a layer: attention, MLP, two norms
    return vocab * h * (1 if tied else 2) + layers * (attn + mlp + 2 * h) + h
# --8<-- [end:formula]


# --8<-- [start:gpt]
class GPTAttention(nn.Module):  # multi-head: q, k, v from one matrix; dropout after o
    def __init__(self, h, heads, p):
        super().__init__()
        self.heads, self.qkv, self.o = heads, nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).transpose(1, 3).unbind(2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.drop(self.o(a.transpose(1, 2).reshape(b, s, h)))


class GPTBlock(nn.Module):  # GPT-3: LayerNorm, attention, GeLU MLP of 4h, dropout
    def __init__(self, h, heads, p=0.1):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.attn = GPTAttention(h, heads, p)
        self.mlp = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h),
                                 nn.Dropout(p))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))
# --8<-- [end:gpt]
