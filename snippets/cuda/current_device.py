"""The current device: what "cuda" means, and where new tensors land."""

import argparse
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

# --8<-- [start:current]
print("GPUs:", torch.cuda.device_count(), "current:", torch.cuda.current_device())
a = torch.ones(1, device="cuda")  # "cuda" means the current device
last = torch.cuda.device_count() - 1

with torch.cuda.device(last):  # the current device, for this block only
    b = torch.ones(1, device="cuda")  # follows the current device
    c = torch.ones(1, device="cuda:0")  # an explicit index always wins
    d = a + a  # results land where their inputs are
    print(
        f"inside: current={torch.cuda.current_device()} b={b.device} c={c.device} "
        f"d={d.device}"
    )

print(f"after: current={torch.cuda.current_device()}")
torch.cuda.set_device(last)  # for the rest of this thread
print(
    "after set_device:",
    torch.ones(1, device="cuda").device,
    torch.ones(1).cuda().device,
)
# --8<-- [end:current]
