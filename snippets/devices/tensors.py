"""Where tensors are created, and what .to() gives back."""

import argparse

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

# --8<-- [start:create]
x = torch.tensor([1.0, 2.0, 3.0])  # no device given: the CPU
y = torch.ones(2, 3, device=device)  # created directly on `device`
z = torch.zeros_like(y)  # *_like: same shape, dtype and device as y
print(x.device, y.device, z.device)
# --8<-- [end:create]

# --8<-- [start:to]
moved = x.to(device)
print("x.to(device) is x:", moved is x)
moved[0] = 100.0  # change the result of .to() ...
print("x after changing the result:", x)  # ... and see whether x changed too

print("y.to(y.device) is y:", y.to(y.device) is y)  # already there: the same object
forced = y.to(y.device, copy=True)  # copy=True always gives a new tensor
print("with copy=True:", forced is y)
# --8<-- [end:to]

# --8<-- [start:cuda]
try:
    w = x.cuda()  # shorthand for x.to("cuda"): needs a usable GPU
    print("x.cuda() is on", w.device)
except (AssertionError, RuntimeError) as e:
    first = str(e).split(". ")[0]  # torch's first sentence, not its advice
    print(f"x.cuda() raised {type(e).__name__}: {first}")
# --8<-- [end:cuda]
