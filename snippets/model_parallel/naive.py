"""Naive model parallelism: two stages of one model on two devices, activations moved by
hand."""

import argparse
import copy
import time

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:devices]
n = torch.cuda.device_count()
if n >= 2:
    dev0, dev1 = torch.device("cuda:0"), torch.device("cuda:1")
    where = "two GPUs: stage 0 on cuda:0, stage 1 on cuda:1"
elif n == 1:
    dev0 = dev1 = torch.device("cuda:0")
    where = "one GPU: both stages on cuda:0 (the split is shown, not the memory saving)"
else:
    dev0 = dev1 = torch.device("cpu")
    where = "no GPU: both stages on the CPU (the split is shown, not the memory saving)"
print(where)
# --8<-- [end:devices]

# --8<-- [start:model]
class TwoStage(nn.Module):
    def __init__(self, full: nn.Sequential, cut: int):
        super().__init__()
        self.stage0 = full[:cut].to(dev0)  # first layers on the first device
        self.stage1 = full[cut:].to(dev1)  # the rest on the second

    def forward(self, x):
        h = self.stage0(x.to(dev0))
        return self.stage1(h.to(dev1))  # the activation crosses devices here


torch.manual_seed(0)
full = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                     nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
split = TwoStage(copy.deepcopy(full), cut=4)
full = full.to(dev0)
# --8<-- [end:model]

# --8<-- [start:train]
opt_full = torch.optim.SGD(full.parameters(), lr=0.1)
opt_split = torch.optim.SGD(split.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()
for step in range(3):
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    for model, opt in ((full, opt_full), (split, opt_split)):
        opt.zero_grad()
        out = model(x.to(dev0))
        loss = loss_fn(out, y.to(out.device))  # labels go where the output is
        loss.backward()
        opt.step()
diff = max((a.detach().cpu() - b.detach().cpu()).abs().max().item()
           for a, b in zip(full.parameters(), split.parameters()))
verdict = ("< 1e-5: equal up to float32 round-off" if diff < 1e-5
           else ">= 1e-5: NOT equal, more than round-off")  # what the figure shows
print(f"after 3 SGD steps, max abs diff of the parameters: {diff:.1e}\n  ({verdict})")
assert diff < 1e-5, "the split model trained differently"
# --8<-- [end:train]

# --8<-- [start:timeline]
def sync(d):
    if d.type == "cuda":
        torch.cuda.synchronize(d)


x = torch.randn(256, 128, device=dev0)
runs = []
with torch.no_grad():
    # the fastest of 5 runs: the first one warms up, others may be preempted
    for _ in range(5):
        t0 = time.perf_counter()
        h = split.stage0(x)
        sync(dev0)
        t1 = time.perf_counter()
        out = split.stage1(h.to(dev1))
        sync(dev1)
        t2 = time.perf_counter()
        runs.append((t2 - t0, t0, t1, t2))
_, t0, t1, t2 = min(runs)
ms = lambda t: f"{(t - t0) * 1e3:.2f} ms"
print(f"stage 0 ({dev0}) works from {ms(t0)} to {ms(t1)}")
print(f"stage 1 ({dev1}) works from {ms(t1)} to {ms(t2)}")
# --8<-- [end:timeline]
