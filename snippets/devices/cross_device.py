"""An operation needs all its tensors on one device (a 0-dim CPU tensor is the
exception)."""

import argparse

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

# --8<-- [start:mix]
a = torch.ones(2, 2, device=device)
b = torch.ones(2, 2)  # on the CPU
print("a is on", a.device, "and b is on", b.device)
try:
    print(a + b)
except RuntimeError as e:
    print("RuntimeError:", e)
# --8<-- [end:mix]

# --8<-- [start:scalar]
print((a + torch.tensor(1.0)).device)  # a 0-dim CPU tensor may join in
# --8<-- [end:scalar]

# --8<-- [start:fix]
print(a + b.to(a.device))  # move one operand to the other's device
# --8<-- [end:fix]
