"""Grouped GEMM: the experts of a mixture-of-experts layer as one torch._grouped_mm per
weight matrix instead of a Python loop over experts; equal outputs and gradients, and
the matrix multiplications counted with a TorchDispatchMode.

Run: python snippets/expert/grouped.py
"""

import argparse
import sys

import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--experts", type=int, default=8, help="E, experts in the layer")
E = parser.parse_args().experts
H, FF, K, T = 8, 16, 2, 32  # hidden, expert hidden, experts per token, tokens

# --8<-- [start:experts]
torch.manual_seed(0)
x = torch.randn(T, H)
chosen = (x @ torch.randn(E, H).T).topk(K).indices  # a router's choice, K per token
order = chosen.flatten().argsort(stable=True)  # (token, expert) pairs sorted by expert
counts = torch.bincount(chosen.flatten(), minlength=E)  # rows per expert
rows = x[order // K]  # expert 0's rows, then expert 1's, ...
w1, w3 = torch.randn(2, E, FF, H) / H**0.5  # (expert, out, in), as torchtitan has
w2 = torch.randn(E, H, FF) / FF**0.5


def loop(x, counts, w1, w3, w2):  # one expert at a time: 3 matmuls each
    return torch.cat([(F.silu(xe @ a.T) * (xe @ c.T)) @ b.T for xe, a, c, b
                      in zip(x.split(counts.tolist()), w1, w3, w2)])


def grouped(x, counts, w1, w3, w2):  # all experts at once: 3 grouped matmuls
    offs = counts.cumsum(0).to(torch.int32)  # where each expert's rows end
    h = F.silu(torch._grouped_mm(x, w1.mT, offs=offs))
    return torch._grouped_mm(h * torch._grouped_mm(x, w3.mT, offs=offs), w2.mT,
                             offs=offs)
# --8<-- [end:experts]


# --8<-- [start:count]
MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default,
           torch.ops.aten.addmm.default, torch.ops.aten._grouped_mm.default}


class Matmuls(TorchDispatchMode):  # every matrix multiplication torch runs, by op
    def __init__(self):
        super().__init__()
        self.calls = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            op = str(func.overloadpacket)  # aten.mm, aten._grouped_mm, ...
            self.calls[op] = self.calls.get(op, 0) + 1
        return func(*args, **(kwargs or {}))


print(f"{E} experts, top-{K}, {T} tokens: rows per expert {counts.tolist()}")
target = torch.randn(T * K, H)  # the gradient of the output (a contiguous one)
results, failed = {}, []
for name, experts, per_expert in [("loop", loop, True), ("grouped", grouped, False)]:
    params = [t.clone().requires_grad_() for t in (rows, w1, w3, w2)]
    with Matmuls() as fwd:
        out = experts(params[0], counts, *params[1:])
    with Matmuls() as bwd:
        (out * target).sum().backward()
    results[name] = [out.detach()] + [p.grad for p in params]
    for phase, seen, n in [("forward", fwd, 3), ("backward", bwd, 6)]:  # 2 per matmul
        predicted, counted = n * E if per_expert else n, sum(seen.calls.values())
        print(f"{name}, matmul calls, {phase}: predicted {predicted:,} calls, "
              f"counted {counted:,} calls\n  ("
              + ", ".join(f"{c} x {op}" for op, c in seen.calls.items()) + ")")
        failed += [] if predicted == counted else [f"{name}, {phase}"]
# --8<-- [end:count]
# --8<-- [start:check]
for what, a, b in zip(["output", "grad input", "grad w1", "grad w3", "grad w2"],
                      results["grouped"], results["loop"]):
    d = ((a - b).abs().max() / b.abs().max()).item()  # relative to the loop's
    ok = d < 1e-6
    print(f"grouped vs loop, {what}: max rel diff {d:.1e} "
          + ("(< 1e-6: float32 round-off)" if ok else "(>= 1e-6: NOT equal)"))
    failed += [] if ok else [what]
try:  # bfloat16 rows of H = 4 values, 8 B: the kernels want strides of 16 B
    b = torch.ones(T * K, 4, dtype=torch.bfloat16)
    torch._grouped_mm(b, torch.ones(E, 4, 4, dtype=torch.bfloat16),
                      offs=counts.cumsum(0).to(torch.int32))
    print("bfloat16 rows of 8 B: accepted")
except RuntimeError as e:
    print(f"bfloat16 rows of 8 B: RuntimeError: {e}")
try:  # the gradient of .sum() is one value expanded, with strides 0
    grouped(rows.requires_grad_(), counts, w1, w3, w2).sum().backward()
    print("grouped(...).sum().backward(): accepted")
except RuntimeError as e:
    print(f"grouped(...).sum().backward(): RuntimeError:\n  {e}")
out = grouped(rows, counts, w1, w3, w2)
out.backward(torch.ones_like(out))  # the same gradient, in memory of its own
print("grouped(...).backward(torch.ones_like(out)): accepted")
if failed:
    sys.exit(f"predicted != counted or grouped != loop: {failed}")
# --8<-- [end:check]
