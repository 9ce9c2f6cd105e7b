"""Cross-entropy over a vocabulary in chunks of tokens, against the full one: the same
loss and gradients, while autograd keeps no s·b × V matrix for backward and the largest
token × vocabulary tensor is one chunk's. Counted by saved-tensor hooks and a dispatch
mode."""

import argparse

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
torch.manual_seed(0)
B, S, H, V = 2, 64, 64, 2048  # sequences, positions, width, vocabulary
CHUNK = 32  # tokens a chunk


# --8<-- [start:chunked]
class ChunkedCE(torch.autograd.Function):  # mean cross-entropy of the logits x @ w.T
    @staticmethod
    def forward(ctx, x, w, targets, chunk):  # x: (tokens, h), w: (V, h)
        lse = torch.cat([torch.logsumexp(x[i:i + chunk] @ w.T, dim=-1)  # (chunk, V)
                         for i in range(0, len(x), chunk)])  # one float32 a token
        ctx.save_for_backward(x, w, targets, lse)  # no logits: backward recomputes them
        ctx.chunk = chunk
        return (lse - (x * w[targets]).sum(-1)).mean()  # minus the target's logit

    @staticmethod
    def backward(ctx, grad):
        x, w, targets, lse = ctx.saved_tensors
        gx, gw = torch.empty_like(x), torch.zeros_like(w)
        for i in range(0, len(x), ctx.chunk):  # one chunk's (chunk, V) at a time
            j = slice(i, i + ctx.chunk)
            p = torch.exp(x[j] @ w.T - lse[j, None])  # the chunk's softmax
            p[torch.arange(len(p)), targets[j]] -= 1  # minus the one-hot target
            p *= grad / len(x)  # the mean over every token, not over the chunk
            gx[j] = p @ w
            gw += p.T @ x[j]
        return gx, gw, None, None
# --8<-- [end:chunked]


# --8<-- [start:count]
class Largest(TorchDispatchMode):  # sees every op: the largest token x V output
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[1] == V:
            mine = out.untyped_storage().data_ptr()  # new: no view, no in-place
            if all(mine != a.untyped_storage().data_ptr() for a in args
                   if isinstance(a, torch.Tensor)):
                self.bytes = max(self.bytes, out.numel() * out.element_size())
        return out


def run(loss_fn, x, w):  # the loss, its gradients, bytes kept, the largest tensor
    found = {}  # storage -> bytes: each once, the weight (a parameter) left out

    def pack(t):
        if t.untyped_storage().data_ptr() != w.untyped_storage().data_ptr():
            found[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    x.grad = w.grad = None
    with Largest() as largest:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_fn()
        loss.backward()
    return loss.detach(), x.grad, w.grad, sum(found.values()), largest.bytes
# --8<-- [end:count]


# --8<-- [start:predict]
def full_bytes(b, s, h, v):  # kept: the hidden states (the head's input), the float32
    return 4 * b * s * h + 4 * b * s * v + 8 * b * s + 4  # log-softmax, int64 targets,
    # and the loss's total weight, one float32


def chunked_bytes(b, s, h, v):  # kept: the hidden states, targets, a log-sum-exp each
    return 4 * b * s * h + 8 * b * s + 4 * b * s


def largest_bytes(tokens, v):  # one (tokens, V) float32 tensor: the logits or a chunk's
    return 4 * tokens * v
# --8<-- [end:predict]


# --8<-- [start:run]
x = torch.randn(B * S, H, requires_grad=True)  # the final norm's output, float32
w = torch.nn.Parameter(torch.randn(V, H) / H**0.5)  # the output head
targets = torch.randint(V, (B * S,))
full = run(lambda: F.cross_entropy(x @ w.T, targets), x, w)
chunked = run(lambda: ChunkedCE.apply(x, w, targets, CHUNK), x, w)
failed = []


def report(what, predicted, counted):
    print(f"{what}: predicted {predicted:,} B, counted {counted:,} B")
    if predicted != counted:
        failed.append(what)


print(f"b = {B}, s = {S}, h = {H}, V = {V:,}, chunks of {CHUNK} tokens; float32")
for name, got in (("loss", 0), ("grad of x", 1), ("grad of w", 2)):
    diff = ((chunked[got] - full[got]).abs().max() / full[got].abs().max()).item()
    verdict = "equal up to float32 round-off" if diff < 1e-5 else "DIFFERENT"
    print(f"{name}: relative difference {diff:.1e} (< 1e-5: {verdict})")
    if diff >= 1e-5:
        failed.append(name)
report("full, kept for backward", full_bytes(B, S, H, V), full[3])
report("chunked, kept for backward", chunked_bytes(B, S, H, V), chunked[3])
report("full, largest token x V tensor", largest_bytes(B * S, V), full[4])
report("chunked, largest token x V tensor", largest_bytes(CHUNK, V), chunked[4])
b, s, h, v = 1, 8192, 4096, 128256
print("Formula only, Llama-3-8B's head, b = 1, s = 8,192, chunks of 1,024 tokens:")
print(f"  kept for backward: full {full_bytes(b, s, h, v) / 1e9:.2f} GB, "
      f"chunked {chunked_bytes(b, s, h, v) / 1e9:.2f} GB")
print(f"  largest token x V tensor: full {largest_bytes(b * s, v) / 1e9:.2f} GB, "
      f"chunked {largest_bytes(1024, v) / 1e9:.2f} GB")
if failed:
    raise SystemExit(f"chunked != full: {', '.join(failed)}")
# --8<-- [end:run]
