"""Module.to() moves parameters and buffers in place; the model's output lands with its
inputs."""

import argparse

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

# --8<-- [start:model]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
first = next(model.parameters())
print("before:", {p.device.type for p in model.parameters()})

returned = model.to(device)  # in place: no need to write model = model.to(device)
print("returned is model:", returned is model)
print("after:", {str(t.device) for t in model.state_dict().values()})
print("same Parameter objects:", first is next(model.parameters()))
# --8<-- [end:model]

# --8<-- [start:forward]
x = torch.randn(3, 4, device=device)
print("output on", model(x).device)
try:
    model(torch.randn(3, 4))  # a CPU batch into the model
    print("a CPU batch worked: the model is on the CPU too")
except RuntimeError as e:
    print("RuntimeError:", e)
# --8<-- [end:forward]
