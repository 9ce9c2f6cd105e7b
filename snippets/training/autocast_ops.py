"""What autocast does per op: the output dtype of a few ops under bf16 and fp16."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
print("device:", device)

# --8<-- [start:ops]
torch.manual_seed(0)
x = torch.randn(4, 8, device=device)  # float32 inputs and weights
linear = nn.Linear(8, 8).to(device)
target = torch.zeros(4, dtype=torch.long, device=device)
table = {}
for dtype in (torch.bfloat16, torch.float16):
    with torch.autocast(device, dtype=dtype):
        y = linear(x)  # runs in low precision: the weights are cast on the fly
        outs = {
            "linear": y,
            "matmul": x @ x.T,
            "relu": torch.relu(y),  # follows its input
            "softmax": torch.softmax(y, dim=-1),
            "sum": y.sum(),
            "cross_entropy": nn.functional.cross_entropy(y, target),
            "mse_loss": nn.functional.mse_loss(y, torch.zeros_like(x)),
            "y + x": y + x,  # mixed inputs: promoted to the widest type
        }
    for op, out in outs.items():
        table.setdefault(op, []).append(str(out.dtype)[6:])
print(f"{'op under autocast':18} {'bfloat16':>10} {'float16':>10}")
for op, (bf, fp) in table.items():
    print(f"{op:18} {bf:>10} {fp:>10}")
print("weight stays", str(linear.weight.dtype)[6:], "| grad of weight:", end=" ")
outs["cross_entropy"].backward()
print(str(linear.weight.grad.dtype)[6:])
# --8<-- [end:ops]
