"""FLOPs of a training step of Llama- and DeepSeek-shaped models: predicted as 6·P per
token for the weights plus PaLM's 12·L·h·s for attention, counted by FlopCounterMode
on a forward and backward; then what an MFU from 6·P alone leaves out at 4k and 128k.
"""

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from shapes_model import Model, attention, model, swiglu

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
torch.manual_seed(0)
V, H, L, HEADS, KV, S, B = 512, 256, 2, 8, 2, 128, 2  # s = 128 positions, b = 2


# --8<-- [start:count]
def counted(m, kernel=SDPBackend.MATH):
    """FLOPs of one forward and backward, split by operator: the weights' matmuls
    (mm, addmm) and attention's, which the math kernel runs as batched matmuls."""
    tokens = torch.randint(V, (B, S))
    with FlopCounterMode(display=False) as fc, sdpa_kernel(kernel):
        F.cross_entropy(m(tokens).flatten(0, 1), tokens.flatten()).backward()
    ops = {str(op): n for op, n in fc.get_flop_counts()["Global"].items()}
    return (ops.get("aten.mm", 0) + ops.get("aten.addmm", 0), ops.get("aten.bmm", 0),
            fc.get_total_flops())
# --8<-- [end:count]


# --8<-- [start:predict]
def predicted(active, layers, h, s, tokens):  # 6 P per token, 12 L h s per token
    return 6 * active * tokens, 12 * layers * h * s * tokens
# --8<-- [end:predict]


# --8<-- [start:run]
failed = []


def report(what, predicted, counted, unit):
    print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


print(f"s = {S}, b = {B}, h = {H}, L = {L}; float32, the math attention kernel")
print("weights: 6·P per token; attention: 12·L·h·s per token; total: both")
for name, f, mlp, kw in [  # a token meets k = 4 routed experts of 16, and the shared
        ("Llama", 688, swiglu(H, 688), {}),
        ("DeepSeek", 64, 4 * swiglu(H, 64) + swiglu(H, 64) + H * 16,
         {"moe": (16, 4, 1)})]:
    # P: the weights a token's matmuls use; not the embedding, a lookup
    active = L * (attention(H, HEADS, KV) + mlp) + V * H  # + the output head
    weights, attn = predicted(active, L, H, S, B * S)
    mm, bmm, total = counted(Model(V, H, L, HEADS, KV, f, **kw))
    report(f"{name}, weights", weights, mm, "FLOP")
    report(f"{name}, attention", attn, bmm, "FLOP")
    report(f"{name}, total", weights + attn, total, "FLOP")
mm, bmm, total = counted(Model(V, H, L, HEADS, KV, 688), SDPBackend.FLASH_ATTENTION)
print(f"Llama under the CPU's flash kernel, attention as counted: {total - mm:,} FLOP")
# --8<-- [end:run]

# --8<-- [start:mfu]
print("\nFormula only, FLOPs per token; ratio: (6·P + attention) / 6·P, attention")
print("counted whole (as PaLM and FlopCounterMode) or half (a causal kernel's work)")
print(f"{'shape':<12}{'s':>9}{'6·P':>10}{'12·L·h·s':>10}{'whole':>7}{'half':>6}")
for name, layers, h, heads, f in [("Llama-3-8B", 32, 4096, 32, 14336),
                                  ("Llama-3-70B", 80, 8192, 64, 28672)]:
    P = model(128256, h, layers, attention(h, heads, 8), swiglu(h, f), tied=False
              ) - 128256 * h  # all weights but the input embedding
    for s in (4096, 131072):
        w, a = 6 * P, 12 * layers * h * s
        print(f"{name:<12}{s:>9,}{w:>10.2e}{a:>10.2e}{(w + a) / w:>7.2f}"
              f"{(w + a / 2) / w:>6.2f}")
# --8<-- [end:mfu]
if failed:
    raise SystemExit(f"predicted != counted: {', '.join(failed)}")
