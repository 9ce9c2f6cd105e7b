"""The classic DataParallel example: who sees which part of each batch.

Run with: python snippets/dp/classic.py [--replicas N]
"""

import argparse
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--replicas", type=int, default=max(2, torch.cuda.device_count()),
                    help="DataParallel replicas (default: one per GPU, at least 2)")
args = parser.parse_args()
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


# --8<-- [start:data]
class RandomDataset(Dataset):
    def __init__(self, size, length):
        self.data = torch.randn(length, size)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


torch.manual_seed(0)
loader = DataLoader(RandomDataset(size=5, length=100), batch_size=30)
# --8<-- [end:data]


# --8<-- [start:model]
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 2)
        # one entry per forward call, appended from whichever thread runs it
        self.seen = []
        self.lock = threading.Lock()

    def forward(self, x):
        y = self.fc(x)
        with self.lock:
            self.seen.append((str(x.device), list(x.shape), list(y.shape)))
        return y
# --8<-- [end:model]


# --8<-- [start:wrap]
inner = Model()
model = inner
gpus = torch.cuda.device_count()
if gpus:
    # fewer GPUs than replicas: they share
    ids = [i % gpus for i in range(args.replicas)]
    print(f"{gpus} GPU(s): nn.DataParallel with {args.replicas} replicas on {ids}")
    model = nn.DataParallel(inner, device_ids=ids)
else:
    print(f"no GPU: the model runs as it is on {device}")
model.to(device)

for batch in loader:
    out = model(batch.to(device))
    # replicas run in threads; sort by device so that the printout has a fixed order
    for dev, xs, ys in sorted(inner.seen):
        print(f"  In Model on {dev}: input {xs}, output {ys}")
    inner.seen.clear()
    print(
        f"Outside: input {list(batch.shape)}, output {list(out.shape)} on {out.device}"
    )
# --8<-- [end:wrap]
