"""torch.set_default_device: what it changes, and what it leaves where it was.

Uses the GPU when there is one, else the meta device (a shape, a dtype, no memory).

Run with: python snippets/production/default_device.py
"""

import argparse
import io
import threading

import numpy as np
import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:before]
x = torch.ones(3)  # made before the default changes
checkpoint = io.BytesIO()
torch.save({"weight": torch.arange(3.0)}, checkpoint)  # a checkpoint saved from the CPU
# --8<-- [end:before]

# --8<-- [start:set]
target = "cuda" if torch.cuda.is_available() else "meta"
torch.set_default_device(target)
print(f"default device: {torch.get_default_device()}")

made = {
    "torch.zeros(3)": torch.zeros(3),
    "torch.tensor([1.0])": torch.tensor([1.0]),
    "nn.Linear(3, 3).weight": nn.Linear(3, 3).weight,
    'torch.zeros(3, device="cpu")': torch.zeros(3, device="cpu"),
    "x, made before": x,
    "x + 1": x + 1,
    "torch.zeros_like(x)": torch.zeros_like(x),
    "torch.from_numpy(...)": torch.from_numpy(np.ones(3)),
}
checkpoint.seek(0)
made["torch.load(checkpoint)"] = torch.load(checkpoint)["weight"]
in_thread = {}
worker = threading.Thread(target=lambda: in_thread.update(t=torch.zeros(3)))
worker.start()
worker.join()
made["torch.zeros(3) in another thread"] = in_thread["t"]
with torch.device("cpu"):  # a block with another default, for this thread
    made['torch.zeros(3) in "with torch.device(\'cpu\')"'] = torch.zeros(3)
# --8<-- [end:set]

# --8<-- [start:show]
for what, tensor in made.items():
    print(f"  {what:<46} -> {tensor.device.type}")
expected = {"torch.zeros(3)", "torch.tensor([1.0])", "nn.Linear(3, 3).weight"}
follow = {what for what, tensor in made.items() if tensor.device.type == target}
assert follow == expected, follow  # only the factory calls without device= follow it
torch.set_default_device(None)  # back to the CPU
print(f"after set_default_device(None): {torch.zeros(3).device}")
# --8<-- [end:show]
