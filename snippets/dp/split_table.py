"""How DataParallel splits a batch: Tensor.chunk along dim 0, computed here and (on >= 2 GPUs) checked."""

import sys

import torch
from torch import nn


# --8<-- [start:rule]
def split_sizes(batch, n_devices):
    """Per-replica batch sizes under DataParallel: the sizes of Tensor.chunk(n_devices) along dim 0."""
    return [len(c) for c in torch.empty(batch, 0).chunk(n_devices, dim=0)]


batches = [30, 30, 30, 10]  # 100 samples in batches of 30
for n in (1, 2, 3, 8):
    print(f"{n} device(s):")
    for batch in sorted(set(batches), reverse=True):
        sizes = split_sizes(batch, n)
        print(f"  batch {batch:2d} -> {len(sizes)} replica(s): {sizes}")
# --8<-- [end:rule]


# --8<-- [start:check]
class Recorder(nn.Module):
    """Records the batch size each replica receives."""

    def __init__(self, seen):
        super().__init__()
        self.fc = nn.Linear(5, 2)
        self.seen = seen

    def forward(self, x):
        self.seen.append((x.get_device(), x.shape[0]))  # list.append is atomic under the GIL
        return self.fc(x)


def check():
    n_gpus = torch.cuda.device_count()
    if n_gpus < 2:
        sys.exit(f"--check needs at least 2 GPUs; this machine has {n_gpus}")
    for n in sorted({k for k in (2, 3, 8) if k <= n_gpus} | {n_gpus}):
        for batch in (30, 10):
            seen = []
            dp = nn.DataParallel(Recorder(seen).cuda(0), device_ids=list(range(n)))
            out = dp(torch.randn(batch, 5, device="cuda:0"))
            got = [size for _, size in sorted(seen)]
            assert got == split_sizes(batch, n), (n, batch, got)
            assert out.shape[0] == batch
            print(f"  real DataParallel on {n} GPUs, batch {batch}: {got} (matches the rule)")
# --8<-- [end:check]


if "--check" in sys.argv:
    check()
