"""Does a loss function need .to(device)? Only when it holds tensors of its own."""

import argparse

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__).parse_args()

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

# --8<-- [start:buffers]
w = torch.tensor([1.0, 2.0, 3.0])  # one weight per class, created on the CPU
p = torch.tensor([2.0])  # weight of the positive class
losses = {
    "CrossEntropyLoss()": nn.CrossEntropyLoss(),
    "CrossEntropyLoss(weight=w)": nn.CrossEntropyLoss(weight=w),
    "BCEWithLogitsLoss(pos_weight=p)": nn.BCEWithLogitsLoss(pos_weight=p),
}
for name, loss_fn in losses.items():  # the tensors a module holds are its buffers
    held = {n: str(b.device) for n, b in loss_fn.named_buffers()}
    print(f"{name:32} holds {held or 'no tensors'}")
# --8<-- [end:buffers]

# --8<-- [start:call]
logits = torch.randn(4, 3, device=device)
target = torch.tensor([0, 1, 2, 0], device=device)
print("plain, never moved:", losses["CrossEntropyLoss()"](logits, target).device)
weighted = losses["CrossEntropyLoss(weight=w)"]
if device.type == "cpu":
    print("no GPU here: the weight and the logits share the CPU, nothing can clash")
else:
    try:
        weighted(logits, target)  # the weight is still on the CPU
    except RuntimeError as e:
        print("weighted, not moved: RuntimeError:", str(e).splitlines()[0])
weighted.to(device)  # moves its buffers, like a model's
print("weighted after .to(device): weight on", weighted.weight.device,
      "| loss on", weighted(logits, target).device)
# --8<-- [end:call]
