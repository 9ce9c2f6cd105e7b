"""When fp16 overflows, and how GradScaler recovers: skip the step, halve the scale."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
print("device:", device)

# --8<-- [start:range]
fp16 = torch.finfo(torch.float16)
print(f"float16: max {fp16.max:.0f}, smallest normal {fp16.tiny:.1e}")
big = torch.tensor([60000.0, 65504.0, 70000.0])
print("60000, 65504, 70000 as float16:", big.half().tolist())
print("300 * 300 in float16:", (torch.tensor(300.0).half() ** 2).item())
print("1e-8 in float16:", torch.tensor(1e-8).half().item(), "(underflow)")
print("bfloat16 keeps 70000 ~", torch.tensor(70000.0).bfloat16().item())
# --8<-- [end:range]

# --8<-- [start:scaler]
torch.manual_seed(0)
model = nn.Linear(8, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler(device, init_scale=2.0**16, growth_interval=2)
x, y = torch.randn(16, 8, device=device), torch.randn(16, 1, device=device)
for step in range(6):
    opt.zero_grad()
    scale = 1e4 if step == 2 else 1.0  # one bad batch: huge activations
    with torch.autocast(device, dtype=torch.float16):
        out = model(x * scale)
    loss = nn.functional.mse_loss(out.float(), y)
    scaler.scale(loss).backward()  # grads of loss * scale, in fp32 parameters
    before = model.weight.detach().clone()
    scale_used = scaler.get_scale()
    scaler.step(opt)  # unscales; skips opt.step() if any grad is inf/nan
    scaler.update()  # halves the scale after a skip, doubles it after
    # growth_interval clean steps
    skipped = torch.equal(before, model.weight)
    print(f"step {step}: loss {loss.item():.3g}  scale {scale_used:>7.0f} -> "
          f"{scaler.get_scale():>7.0f}  {'SKIPPED' if skipped else 'stepped'}")
# --8<-- [end:scaler]
