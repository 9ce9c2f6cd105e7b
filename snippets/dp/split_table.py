"""How DataParallel splits a batch: Tensor.chunk along dim 0, computed, and checked on a
GPU.

Run with: python snippets/dp/split_table.py [--check]
"""

import argparse
import sys

import torch
from torch import nn


# --8<-- [start:rule]
def split_sizes(batch, n_devices):
    """Per-replica batch sizes under DataParallel: Tensor.chunk(n) along dim 0."""
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
        # list.append is atomic under the GIL
        self.seen.append((x.get_device(), x.shape[0]))
        return self.fc(x)


def check():
    gpus = torch.cuda.device_count()
    if not gpus:
        sys.exit(
            "--check runs the real DataParallel, which needs a GPU; this machine has "
            "none"
        )
    for n in (2, 3, 8):
        # fewer GPUs than replicas: replicas share GPUs
        ids = [i % gpus for i in range(n)]
        for batch in (30, 10):
            seen = []
            dp = nn.DataParallel(Recorder(seen).cuda(0), device_ids=ids)
            out = dp(torch.randn(batch, 5, device="cuda:0"))
            got = sorted((size for _, size in seen), reverse=True)
            assert got == split_sizes(batch, n), (n, batch, got)
            assert out.shape[0] == batch
            print(
                f"  DataParallel, {n} replicas on {len(set(ids))} GPU(s), batch "
                f"{batch}: "
                f"{got} (matches the rule)"
            )
    if gpus < 8:
        print("replicas that share a GPU: the split, the replicas and the threads are "
              "DataParallel's own; the speed is not")
# --8<-- [end:check]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="run the real DataParallel (needs a GPU) and compare")
    if parser.parse_args().check:
        check()
