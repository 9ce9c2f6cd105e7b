"""Saved activations offloaded to the host with save_on_cpu: the bytes it holds there,
predicted and counted, alone and around activation checkpointing."""

import argparse
import sys
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
S, B, H, A = 128, 2, 64, 4  # sequence length, batch, hidden size, attention heads


class Block(nn.Module):  # the block of activations.py
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.qkv, self.proj = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.fc1, self.fc2 = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

    def forward(self, x):  # x: (B, S, H); q, k, v: (B, A, S, H/A)
        qkv = self.qkv(self.ln1(x)).view(B, S, 3, A, H // A)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = (q * (H // A) ** -0.5) @ k.transpose(-2, -1)  # (B, A, S, S)
        attn = F.dropout(scores.softmax(-1), 0.1) @ v
        x = x + F.dropout(self.proj(attn.transpose(1, 2).reshape(B, S, H)), 0.1)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), 0.1)


E, sbh = 2, S * B * H  # bytes per bfloat16 number; numbers in one (s, b, h) tensor
mask, stat = (1, 4) if device.type == "cuda" else (E, E)  # as in activations.py
exact = (sbh * (34 + 5 * A * S // H) + (mask - 1) * (A * S * S * B + 2 * sbh)
         + 2 * 2 * S * B * stat)  # the bytes a block keeps without checkpointing
failed = []


def report(what, predicted, counted, unit):
    print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


def step(model, x, wrap, hooks):  # forward under the hooks, backward; the gradients
    torch.manual_seed(1)  # the same dropout masks in every run
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        out = wrap(model, x)
    out.float().square().mean().backward()
    grads = [t.grad.clone() for t in (x, *model.parameters())]
    x.grad, _ = None, model.zero_grad()
    return grads


torch.manual_seed(0)
model = Block().to(device, torch.bfloat16)
x = torch.randn(B, S, H, device=device, dtype=torch.bfloat16, requires_grad=True)
reference = step(model, x, lambda m, x: m(x), (lambda t: t, lambda t: t))

# --8<-- [start:offload]
offload = torch.autograd.graph.save_on_cpu(pin_memory=device.type == "cuda")
weights = E * (12 * H * H + 4 * H)  # 4 weight matrices, the LayerNorms' w and b
full = partial(checkpoint, use_reentrant=False)
params = {p.untyped_storage().data_ptr() for p in model.parameters()}
for name, wrap, predicted in [("save_on_cpu", lambda m, x: m(x), exact + weights),
                              ("full ckpt + save_on_cpu", full, E * sbh)]:
    held, copies = [0], []  # bytes on the host; is each copy a weight's?

    def pack(t):  # save_on_cpu's own hook, counted
        dev, packed = offload.pack_hook(t)  # a copy on the host (on the CPU: t)
        held[0] += packed.numel() * packed.element_size()
        copies.append(t.untyped_storage().data_ptr() in params)
        return dev, packed

    grads = step(model, x, wrap, (pack, offload.unpack_hook))
    report(f"{name}, bytes on the host", predicted, held[0], "B")
    print(f"  tensors saved: {len(copies)}, of them weights: {sum(copies)}")
    diff = max((a - b).abs().max().item() for a, b in zip(grads, reference))
    verdict = "== 0: bit-identical" if diff == 0 else "!= 0: not bit-identical"
    print(f"  gradients vs no offloading: max abs diff {diff:.1e} ({verdict})")
    if diff != 0:
        failed.append(f"{name}, gradients")
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
# --8<-- [end:offload]
