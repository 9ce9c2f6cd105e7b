"""What a transformer block keeps for backward, predicted and counted: without
checkpointing, with full and with selective activation checkpointing."""

import argparse
import inspect
import sys
from collections import Counter
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import (CheckpointPolicy, checkpoint,
                                    create_selective_checkpoint_contexts)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# --8<-- [start:model]
S, B, H, A = 128, 2, 64, 4  # sequence length, batch, hidden size, attention heads


class Block(nn.Module):  # the GPT layer of Korthikanti et al., dropout 0.1
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
# --8<-- [end:model]


# --8<-- [start:predict]
E, sbh = 2, S * B * H  # bytes per bfloat16 number; numbers in one (s, b, h) tensor
paper = sbh * (34 + 5 * A * S // H)  # their eq. (1): 2-byte numbers, 1-byte masks
# Here: on the CPU a dropout mask is the scaled noise in bfloat16 (CUDA: a bool);
# a LayerNorm keeps a mean and 1/std per token (CUDA: float32; CPU: the input's)
mask, stat = (1, 4) if device.type == "cuda" else (E, E)
exact = paper + (mask - 1) * (A * S * S * B + 2 * sbh) + 2 * 2 * S * B * stat
forward = 24 * B * S * H * H + 4 * B * S * S * H  # matmul FLOPs of the forward
failed = []


def report(what, predicted, counted, unit):
    print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


def same(name, grads):  # recomputing runs the same kernels on the same inputs
    diff = max((a - b).abs().max().item() for a, b in zip(grads, reference))
    verdict = "== 0: bit-identical" if diff == 0 else "!= 0: not bit-identical"
    print(f"  gradients vs no checkpointing: max abs diff {diff:.1e} ({verdict})")
    if diff != 0:
        failed.append(f"{name}, gradients")
# --8<-- [end:predict]


# --8<-- [start:count]
aten = torch.ops.aten
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default}


class Ops(TorchDispatchMode):  # sees every op below autograd
    def __init__(self):
        super().__init__()
        self.ops, self.flops = Counter(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.is_grad_enabled():  # forward or its recomputation: backward's own
            self.ops[func.overloadpacket.__name__] += 1  # ops run with grad mode off
            if func in MATMULS:  # mm(a, b), addmm(bias, a, b), bmm(a, b)
                a, b = args[-2:]  # 2 FLOPs per multiply-add
                self.flops += 2 * a.numel() * b.shape[-1]
        return func(*args, **(kwargs or {}))


def storage(t):  # (address, bytes) of the memory a tensor views
    return t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()


def run(model, x, wrap, hooks=None):
    params, kept = {storage(p)[0] for p in model.parameters()}, {}

    def count(t):  # parameters are in memory anyway; a view of a kept tensor is free
        if storage(t)[0] not in params:
            kept.update([storage(t)])
        return t

    torch.manual_seed(1)  # the same dropout masks in every run
    with torch.autograd.graph.saved_tensors_hooks(*hooks or (count, lambda t: t)):
        with Ops() as fwd:
            out = wrap(model, x)
    loss = out.float().square().mean()
    seed = torch.ones_like(loss)  # backward's first gradient, made outside the count
    with Ops() as again:  # what checkpointing runs a second time
        loss.backward(seed)
    grads = [t.grad.clone() for t in (x, *model.parameters())]
    x.grad, _ = None, model.zero_grad()
    return sum(kept.values()), fwd, again, grads
# --8<-- [end:count]


# --8<-- [start:policy]
LINEAR = {aten.addmm.default, aten.mm.default}  # the products of nn.Linear
cached = {}  # what selective checkpointing keeps, each storage once


def policy(ctx, op, *args, **kwargs):  # called for every op of the forward
    if op in LINEAR:
        if hasattr(ctx, "op_output"):  # torch 2.13 shows the policy the output
            cached.update([storage(ctx.op_output)])
        elif not ctx.is_recompute:  # torch 2.11: an (a.rows, b.cols) product of a, b
            a, b = args[-2:]  # (older torch calls the policy again in backward)
            cached[len(cached)] = a.shape[0] * b.shape[1] * a.element_size()
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE  # softmax, dropout, GELU, norms, bmm


full = partial(checkpoint, use_reentrant=False)
# torch 2.14 asks whether what SAC saves goes through saved-tensor hooks; False keeps
# the behaviour of earlier releases: it does not, and `cached` above counts it instead
legacy = {"respect_saved_tensors_hooks": False} if "respect_saved_tensors_hooks" in \
    inspect.signature(checkpoint).parameters else {}
selective = partial(checkpoint, use_reentrant=False, **legacy, context_fn=partial(
    create_selective_checkpoint_contexts, policy))
# --8<-- [end:policy]

# --8<-- [start:runs]
torch.manual_seed(0)
model = Block().to(device, torch.bfloat16)
x = torch.randn(B, S, H, device=device, dtype=torch.bfloat16, requires_grad=True)
print(f"{device.type}, bfloat16, s={S} b={B} h={H} a={A};\n  Korthikanti et al.'s "
      f"s*b*h*(34 + 5*a*s/h) = {paper:,} B")
kept, fwd, _, reference = run(model, x, lambda m, x: m(x))
report("no checkpointing, bytes kept", exact, kept, "B")
report("forward, matmul FLOPs", forward, fwd.flops, "FLOP")
for name, wrap, predicted, recomputed in [  # full keeps the input, recomputes all;
        ("full", full, E * sbh, forward),  # selective keeps the input
        ("selective", selective,  # and 3h + h + 4h + h per token
         E * sbh * (1 + 3 + 1 + 4 + 1), 4 * B * S * S * H)]:  # and recomputes 2 bmm
    kept, _, again, grads = run(model, x, wrap)
    print({"full": "full: full checkpointing",
           "selective": "selective: Linear outputs kept"}[name])
    report(f"{name}, bytes kept", predicted, kept + sum(cached.values()), "B")
    report(f"{name}, FLOPs recomputed", recomputed, again.flops, "FLOP")  # matmuls
    shown = ("addmm", "bmm", "_softmax", "gelu", "native_layer_norm", "bernoulli_")
    print(f"  ops run again in backward: {again.ops.total()} of the forward's "
          f"{fwd.ops.total()};\n    " + ", ".join(f"{o} {again.ops[o]}" for o in shown))
    same(name, grads)
    cached.clear()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
# --8<-- [end:runs]
