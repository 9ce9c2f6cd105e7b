"""A mixed-precision training loop: bf16 autocast, or fp16 autocast with GradScaler."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", nargs="+", choices=["fp32", "bf16", "fp16"],
                    default=["bf16", "fp16"])
args = parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"


def train(dtype_name: str) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(64, 16, device=device)
    y = x.sum(-1, keepdim=True)  # a learnable target
    # --8<-- [start:loop]
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    dtype = dtypes[dtype_name]
    use_amp = dtype != torch.float32
    # the scaler is only needed for fp16; enabled=False makes it a pass-through
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
    losses = []
    for step in range(30):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype, enabled=use_amp):
            loss = nn.functional.mse_loss(model(x), y)  # forward + loss under autocast
        scaler.scale(loss).backward()  # backward outside autocast
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    # --8<-- [end:loop]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 weights
    return losses


ref = train("fp32")
print(f"device {device}, fp32: loss {ref[0]:.3f} -> {ref[-1]:.3f} in {len(ref)} steps")
for name in args.dtype:
    losses = train(name)
    print(f"device {device}, {name}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.2 * losses[0], "did not learn"
