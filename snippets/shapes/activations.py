"""The activations one decoder layer keeps for backward, in bfloat16 on the CPU: a GPT-3
block, Llama-shaped layers and a DeepSeek-shaped mixture of experts, each predicted by
a formula in s, b, h, h_kv, F (and k, E) and counted by saved-tensor hooks; then the
formula for published shapes, in bytes per s·b·h.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from shapes_model import GPTBlock, Layer, Model

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
torch.manual_seed(0)
S, B, H, HEADS = 64, 2, 256, 8  # positions, sequences, width, query heads
T = S * B  # tokens
dtype = torch.bfloat16


# --8<-- [start:count]
def kept(layer, *args):
    """Bytes autograd keeps for backward in one forward of layer, by part (norms,
    attention, mlp): each storage once, where first saved; no parameters or buffers."""
    own = {t.untyped_storage().data_ptr() for t in (*layer.parameters(),
                                                    *layer.buffers(), *args[1:])}
    part = {m: ("norms" if n.startswith("norm") else n.split(".")[0] or "layer")
            for n, m in layer.named_modules()}
    running, found = [], {}  # the parts whose forward runs; storage -> (part, bytes)
    hooks = [h for m in part for h in (
        m.register_forward_pre_hook(lambda m, a: running.append(part[m])),
        m.register_forward_hook(lambda m, a, out: running.pop() and None))]

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in own:
            found.setdefault(s.data_ptr(), (running[-1], s.nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(*args)
    out.backward(torch.ones_like(out))  # a given gradient: no loss keeps tensors
    for h in hooks:
        h.remove()
    return {p: sum(n for q, n in found.values() if q == p)
            for p in {"norms", "attn", "mlp"} | {q for q, n in found.values()}}
# --8<-- [end:count]


# --8<-- [start:predict]
def llama_bytes(h, heads, h_kv, f, fused=False):  # kept per token, by part
    return {"norms": 2 * ((2 * h if fused else 8 * h) + 4),  # see the text
            "attn": 2 * h  # the input of q, k and v (one tensor for the three)
            + 2 * h + 2 * 2 * h_kv  # q, k (after RoPE) and v: h_kv wide, not h
            + 2 * h + 4 * heads,  # the kernel's output, o's input as it is; a float32
            # log-sum-exp a head (a RoPE after the transpose would add o's input, 2 h)
            "mlp": 2 * h + 4 * 2 * f}  # input; silu's in and out, w3's out, w2's in


def moe_bytes(h, f, experts, k, shared):  # the MoE's part, per token
    token = (2 * h + 2 * experts  # the router's input and its sigmoid scores
             + 8 * k + 2 * k + 2  # top-k: int64 indices, scores, their sum
             + 4 * 2 * shared * f)  # the shared experts' SwiGLU
    return token + k * (16  # per routed token: its token and slot indices (int64)
                        + 2 * h + 4 * 2 * f  # its copy of the input, the SwiGLU
                        + 2 + 2 * h + 2 * h)  # its weight, output, weighted output


def gpt_bytes(h, heads, mask=2):  # mask: bytes of one dropout mask value
    return {"norms": 2 * (2 * h + 2 + 2),  # LayerNorm: input, mean, 1/std
            "attn": 2 * h + 3 * 2 * h + 2 * h + 4 * heads + mask * h,  # o reads the
            "mlp": 2 * h + 2 * 4 * h + 2 * 4 * h + mask * h}  # output as it is
# --8<-- [end:predict]


# --8<-- [start:run]
failed = []


def report(what, predicted, counted, unit):
    print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


x = torch.randn(B, S, H, dtype=dtype, requires_grad=True)
rope = Model(8, H, 0, HEADS, HEADS, 1, seq=S).to(dtype)  # only its RoPE angles
layers = [  # name, the layer, its prediction per token
    ("GPT-3 block", GPTBlock(H, HEADS), gpt_bytes(H, HEADS)),
    ("Llama-2-7B ratios", Layer(H, HEADS, HEADS, 688), llama_bytes(H, HEADS, H, 688)),
    ("Llama-3-70B ratios", Layer(H, HEADS, 1, 896),  # h_kv = h / 8, F = 3.5 h
     llama_bytes(H, HEADS, H // 8, 896)),
    ("DeepSeek-shaped MoE", Layer(H, HEADS, HEADS, 64, moe=(16, 4, 1)),  # E, k, shared
     llama_bytes(H, HEADS, H, 0) | {"mlp": moe_bytes(H, 64, 16, 4, 1)})]
print(f"s = {S}, b = {B}, h = {H}, {HEADS} query heads; bfloat16, counted on the CPU")
for name, layer, per_token in layers:
    layer = layer.to(dtype)
    args = (x,) if isinstance(layer, GPTBlock) else (x, rope.cos, rope.sin)
    counted = kept(layer, *args)
    for part, label in (("norms", "norms"), ("attn", "attention"), ("mlp", "MLP")):
        report(f"{name}, {label}", T * per_token[part], counted[part], "B")
    total = sum(counted.values())  # every part, also any the formula has not
    report(f"{name}, layer", T * sum(per_token.values()), total, "B")
    print(f"  = {total / (S * B * H):.2f} bytes per s·b·h")
q = torch.randn(1, 4, 2, 8, dtype=dtype, requires_grad=True)  # (b, s, heads, d)
fn = F.scaled_dot_product_attention(*[q.transpose(1, 2)] * 3, is_causal=True).grad_fn
print(f"the attention kernel torch picked: {type(fn).__name__}")
for order, t in (("b, s, heads, d", q.transpose(1, 2)),  # RoPE before the transpose
                 ("b, heads, s, d", q.transpose(1, 2).contiguous())):  # after, with cat
    a = F.scaled_dot_product_attention(t, t, t, is_causal=True)
    view = a.transpose(1, 2).reshape(1, 4, -1).data_ptr() == a.data_ptr()
    print(f"q stored as ({order}): o's input {'a view' if view else 'a copy'}")
# --8<-- [end:run]


# --8<-- [start:math]
def math_bytes(h, heads, s):  # per token: the input of q, k, v; float32 copies of q,
    return 2 * h + 3 * 4 * h + 4 * heads * s + 2 * h  # k, v (every head), the scores


with sdpa_kernel(SDPBackend.MATH):  # the Llama-3-70B-shaped layer: 1 K/V head for 8
    counted = kept(layers[2][1], x, rope.cos, rope.sin)["attn"]
report("Llama-3-70B ratios, math attention", T * math_bytes(H, HEADS, S), counted, "B")
# --8<-- [end:math]


# --8<-- [start:head]
class HeadLoss(nn.Module):  # once per model: the final norm, the head, the loss
    def __init__(self, model):
        super().__init__()
        self.norm, self.head = model.norm, model.head

    def forward(self, x, targets):  # float32 logits for the loss, as Hugging Face does
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits.flatten(0, 1), targets)


def head_bytes(h, vocab):  # per token: the norm (unfused), the head's input, and the
    return 8 * h + 4 + 2 * h + 4 * vocab  # float32 log-softmax over the vocabulary


V = 1024
loss = HeadLoss(Model(V, H, 0, HEADS, HEADS, 1, seq=S).to(dtype))
counted = sum(kept(loss, x, torch.randint(V, (B * S,))).values())
report(f"output head and loss, V = {V:,}", T * head_bytes(H, V) + 4, counted,
       "B")  # + 4: the loss's float32 total weight, one scalar
# --8<-- [end:head]

# --8<-- [start:published]
print("\nFormula only, bytes per s·b·h per layer (bf16, flash kernel):")
print(f"{'shape':<14}{'h':>7}{'h_kv':>6}{'F':>7}{'heads':>6}{'unfused':>9}"
      f"{'fused':>7}")
for name, h, h_kv, f, heads in [("Llama-2-7B", 4096, 4096, 11008, 32),
                                ("Llama-3-8B", 4096, 1024, 14336, 32),
                                ("Llama-3-70B", 8192, 1024, 28672, 64),
                                ("Qwen2.5-7B", 3584, 512, 18944, 28)]:
    unfused, fused = (sum(llama_bytes(h, heads, h_kv, f, z).values()) / h
                     for z in (0, 1))
    print(f"{name:<14}{h:>7,}{h_kv:>6,}{f:>7,}{heads:>6}{unfused:>9.1f}{fused:>7.1f}")
gpt3 = sum(gpt_bytes(12288, 96, mask=1).values()) / 12288  # a mask of one byte
print(f"GPT-3 175B: {gpt3:.1f} with byte masks (Korthikanti et al.: 34)")
print("Output head and loss, once per model (float32 log-softmax, unfused norm):")
for name, h, vocab in [("Llama-3-8B", 4096, 128256), ("Llama-3-70B", 8192, 128256),
                       ("Qwen2.5-7B", 3584, 152064)]:
    print(f"{name:<14}V = {vocab:,}: {head_bytes(h, vocab) / h:.1f} bytes per s·b·h")
# --8<-- [end:published]
if failed:
    raise SystemExit(f"predicted != counted: {', '.join(failed)}")
