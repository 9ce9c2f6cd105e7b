"""Where things must live under DataParallel: the module on device_ids[0], new tensors
with the input."""

import argparse

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

n_gpus = torch.cuda.device_count()
print(f"GPUs visible: {n_gpus}")


def first_line(e):
    """The error in one line (DataParallel re-raises the replica's error in its own)."""
    lines = [l for l in str(e).strip().splitlines() if l.strip()]
    # "Caught X in replica i on device i. ... X: the original message"
    if len(lines) > 1:
        return f"{type(e).__name__}: {lines[0]} -> {lines[-1].strip()}"
    return f"{type(e).__name__}: {lines[0]}"


# --8<-- [start:device-ids]
model = nn.Linear(5, 2)  # still on the CPU
if n_gpus >= 2:
    dp = nn.DataParallel(model, device_ids=[0, 1], output_device=1)
else:  # all GPUs: none here, or one (and then the constructor moves the model to it)
    dp = nn.DataParallel(model)
print("device_ids kept by DataParallel:", dp.device_ids)
try:
    out = dp(torch.randn(30, 5))
    print("forward ran; output on", out.device)
except RuntimeError as e:
    print(first_line(e))
# --8<-- [end:device-ids]

# --8<-- [start:device-ids-fix]
if n_gpus >= 2:
    # the parameters must be on device_ids[0] before the first forward
    model.to("cuda:0")
    out = dp(torch.randn(30, 5))  # the input may be anywhere, even on the CPU
    print("after model.to('cuda:0'): output on", out.device, "(output_device=1)")
# --8<-- [end:device-ids-fix]


# --8<-- [start:inside-forward]
class Noisy(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.fc, self.how = nn.Linear(5, 2), how

    def forward(self, x):
        y = self.fc(x)
        if self.how == "fixed index":
            noise = torch.randn(y.shape, device="cuda:0")  # always GPU 0
        elif self.how == ".cuda()":
            noise = torch.randn(y.shape).cuda()  # the *current* GPU
        else:  # "like the input"
            # wherever y is: right on every replica, and on the CPU
            noise = torch.randn_like(y)
        return y + noise
# --8<-- [end:inside-forward]


# --8<-- [start:try-them]
device = torch.device("cuda:0" if n_gpus else "cpu")
for how in ("like the input", ".cuda()", "fixed index"):
    net = Noisy(how).to(device)
    if n_gpus >= 2:
        net = nn.DataParallel(net)
    try:
        out = net(torch.randn(30, 5, device=device))
        print(f"{how:>14}: ok, output {list(out.shape)} on {out.device}")
    except (RuntimeError, AssertionError) as e:
        print(f"{how:>14}: {first_line(e)}")
# --8<-- [end:try-them]
