"""Record the allocator's history; dump a snapshot for docs.pytorch.org/memory_viz."""

import argparse
import os
import sys
import tempfile

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--out", help="snapshot file (default: a new temporary directory)")
args = parser.parse_args()
if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")
path = args.out or os.path.join(tempfile.mkdtemp(), "snapshot.pickle")

# --8<-- [start:record]
torch.cuda.memory._record_memory_history(max_entries=100_000)  # every alloc/free
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters())
for _ in range(3):
    loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
    loss.backward()
    opt.step()  # the first step allocates AdamW's state
    opt.zero_grad(set_to_none=True)
torch.cuda.memory._dump_snapshot(path)  # a pickle of segments, blocks and traces
torch.cuda.memory._record_memory_history(enabled=None)  # stop recording
# --8<-- [end:record]
print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
print(f"snapshot written to {path}: open it in https://docs.pytorch.org/memory_viz")
