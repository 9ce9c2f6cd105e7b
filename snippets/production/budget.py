"""torch.compile's activation memory budget: the bytes a compiled transformer block
keeps for backward at budgets 1.0, 0.5 and 0.0, counted with saved-tensor hooks."""

import argparse
import sys

import torch
import torch._functorch.config as functorch_config
import torch.nn.functional as F
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
S, B, H, A = 128, 2, 64, 4  # sequence length, batch, hidden size, attention heads


class Block(nn.Module):  # the block of activations.py, without dropout: the
    def __init__(self):  # partitioner never recomputes random ops
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.qkv, self.proj = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.fc1, self.fc2 = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

    def forward(self, x):  # x: (B, S, H); q, k, v: (B, A, S, H/A)
        qkv = self.qkv(self.ln1(x)).view(B, S, 3, A, H // A)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = (q * (H // A) ** -0.5) @ k.transpose(-2, -1)  # (B, A, S, S)
        attn = scores.softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(B, S, H))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def kept_and_grads(model, x):  # bytes of the saved tensors (each storage once)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def count(t):
        if t.untyped_storage().data_ptr() not in params:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        out = model(x)
    out.float().square().mean().backward()
    grads = [t.grad.clone() for t in (x, *model.parameters())]
    x.grad, _ = None, model.zero_grad()
    return sum(kept.values()), grads


torch.manual_seed(0)
model = Block().to(device, torch.bfloat16)
x = torch.randn(B, S, H, device=device, dtype=torch.bfloat16, requires_grad=True)
print(f"eager, no checkpointing: {kept_and_grads(model, x)[0]:,} B kept")

# --8<-- [start:budget]
# aot_eager_decomp_partition: inductor's decompositions and partitioner, no code
# generation (seconds on a CPU, not minutes); inductor's own graph passes, which run
# before the partitioner, can change what the default (1.0) keeps
failed, results = [], {}
for budget in (1.0, 0.5, 0.0):  # 0.0: as much recomputation as full checkpointing
    torch._dynamo.reset()  # compile again under the new budget
    with functorch_config.patch(activation_memory_budget=budget):
        compiled = torch.compile(model, backend="aot_eager_decomp_partition")
        results[budget] = kept_and_grads(compiled, x)
    if budget:
        print(f"budget {budget}: {results[budget][0]:,} B kept")
predicted, counted = 2 * S * B * H, results[0.0][0]  # 0.0 keeps the block's input
print(f"budget 0.0, bytes kept: predicted {predicted:,} B, counted {counted:,} B")
diff = max((a - b).abs().max().item() for a, b in zip(results[0.0][1], results[1.0][1]))
verdict = "== 0: bit-identical" if diff == 0 else "!= 0: not bit-identical"
print(f"gradients, budget 0.0 vs 1.0: max abs diff {diff:.1e} ({verdict})")
if predicted != counted or diff != 0:
    sys.exit("budget 0.0: predicted != counted, or the gradients differ")
# --8<-- [end:budget]
