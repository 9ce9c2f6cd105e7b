"""Two devices in one operation. With a GPU: cuda:0 and cpu. Without one: the meta
device."""

import argparse

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# the meta device holds shapes and no data: a device other than the CPU that every build
# has
other = torch.device("cuda:0" if torch.cuda.is_available() else "meta")

# --8<-- [start:error]
model = nn.Linear(4, 2).to(other)
x = torch.randn(3, 4)  # created on the CPU
try:
    model(x)
except RuntimeError as e:
    print("RuntimeError:", e)
# --8<-- [end:error]

# --8<-- [start:fix]
x = x.to(next(model.parameters()).device)  # move the input to the model's device
print("output:", model(x).shape, "on", model(x).device)
# --8<-- [end:fix]
