"""Device strings are parsed strictly; get_device() gives the index as an int."""

import argparse

import torch

argparse.ArgumentParser(description=__doc__).parse_args()

# --8<-- [start:strict]
for name in ("cuda:0", "cuda: 0", "cuda:0 "):
    call = f"torch.device({name!r})"
    try:
        print(f"{call:23} -> {torch.device(name)!r}")
    except RuntimeError as e:  # no spaces anywhere
        print(f"{call:23} -> RuntimeError: {e}")
# the usual one-liner hides the typo on a machine without a GPU: the string
# after "if" is never parsed there, so only the GPU machine raises
gpu = torch.cuda.is_available()
try:
    print("on this machine:", torch.device("cuda: 0" if gpu else "cpu"))
except RuntimeError as e:  # what a GPU machine says, where the typo is finally parsed
    print("on this machine: RuntimeError:", e)
# --8<-- [end:strict]

# --8<-- [start:index]
x = torch.ones(2)  # on the CPU
print("x.device:", x.device, "| x.device.index:", x.device.index,
      "| x.get_device():", x.get_device())  # an int: -1 on the CPU
if gpu:
    y = x.cuda()
    print("y.device:", y.device, "| y.device.index:", y.device.index,
          "| y.get_device():", y.get_device())
else:
    print("no GPU here: a CUDA tensor would give its GPU's number")
# --8<-- [end:index]
