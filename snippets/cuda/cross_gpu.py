"""Two GPUs: operations refuse to mix them; copies are fine; peer access makes copies
direct."""

import argparse
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if torch.cuda.device_count() < 2:
    sys.exit(
        "This example needs two CUDA GPUs; this machine has "
        f"{torch.cuda.device_count()}."
    )

# --8<-- [start:mix]
x0 = torch.ones(3, device="cuda:0")
x1 = torch.ones(3, device="cuda:1")
try:
    x0 + x1
except RuntimeError as e:
    print("RuntimeError:", e)
# --8<-- [end:mix]

# --8<-- [start:copy]
y = torch.empty(3, device="cuda:1")
y.copy_(x0)  # copy_ across devices is allowed
print("copy_:", y.device, y.tolist())
print(".to():", x0.to("cuda:1").device)
print("peer access cuda:0 -> cuda:1:", torch.cuda.can_device_access_peer(0, 1))
# --8<-- [end:copy]
