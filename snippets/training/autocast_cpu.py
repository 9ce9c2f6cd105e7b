"""CPU autocast's float32 list: bfloat16 inputs, and the dtype each op returns."""

import argparse

import torch
import torch.nn.functional as F

argparse.ArgumentParser(description=__doc__).parse_args()

# --8<-- [start:ops]
# the CPU's autocast rules, on any machine: a GPU is not used here
x = torch.randn(4, 4).to(torch.bfloat16)  # inputs already in low precision
target = torch.zeros(4, dtype=torch.long)
eye = 4 * torch.eye(4, dtype=torch.bfloat16)
ops = {
    "prod": lambda: x.prod(),
    "cdist": lambda: torch.cdist(x, x),
    "linalg.inv": lambda: torch.linalg.inv(x + eye),
    "fft.fft": lambda: torch.fft.fft(x),  # complex64: two float32 parts
    "nll_loss": lambda: F.nll_loss(x, target),
    "l1_loss": lambda: F.l1_loss(x, x),
    "kl_div": lambda: F.kl_div(x, x, reduction="batchmean"),
    "softmax": lambda: x.softmax(-1),
    "log_softmax": lambda: x.log_softmax(-1),
    "sum": lambda: x.sum(),
    "norm": lambda: x.norm(),
    "layer_norm": lambda: F.layer_norm(x, (4,)),
    "exp": lambda: x.exp(),
    "pow": lambda: x.pow(2),
}
with torch.autocast("cpu", dtype=torch.bfloat16):
    returned = {name: op().dtype for name, op in ops.items()}
for dtype in sorted(set(returned.values()), key=str):
    names = [name for name, d in returned.items() if d == dtype]
    print(f"{str(dtype)[6:]:>9}: {', '.join(names)}")
# --8<-- [end:ops]
