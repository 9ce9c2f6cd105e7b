"""Pageable vs pinned host memory: copy bandwidth, and a non-blocking copy read too early."""

import sys

import torch
from torch.utils.data import DataLoader

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

N = 64 * 2**20  # 64 Mi float32 = 256 MiB
pageable = torch.randn(N)


def gb_per_s(copy, reps=10):
    copy()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        copy()
    end.record()
    end.synchronize()
    return N * 4 * reps / (start.elapsed_time(end) / 1e3) / 1e9


# --8<-- [start:bandwidth]
pinned = pageable.pin_memory()  # pin once, reuse many times
plain = gb_per_s(lambda: pageable.to("cuda"))
fast = gb_per_s(lambda: pinned.to("cuda", non_blocking=True))
mistake = gb_per_s(lambda: pageable.pin_memory().to("cuda"))  # pins a new copy every time
print(torch.cuda.get_device_name(), "| host-to-device, 256 MiB")
print(f"pageable:               {plain:7.1f} GB/s")
print(f"pinned:                 {fast:7.1f} GB/s   pinned / pageable: {fast / plain:.2f}x")
print(f"pin_memory() each time: {mistake:7.1f} GB/s   vs pageable: {mistake / plain:.2f}x")
# --8<-- [end:bandwidth]

# --8<-- [start:loader]
loader = DataLoader(torch.arange(8.0), batch_size=4, pin_memory=True)
print("DataLoader(pin_memory=True) batch is pinned:", next(iter(loader)).is_pinned())
# --8<-- [end:loader]

# --8<-- [start:too-early]
busy = torch.randn(4096, 4096, device="cuda")
src = torch.full((2**20,), 7.0, device="cuda")
dst = torch.zeros(2**20).pin_memory()
for _ in range(50):
    busy @ busy  # keep the GPU busy for a while
dst.copy_(src, non_blocking=True)  # queued behind the matmuls; returns at once
print("read at once, all 7?           ", bool((dst == 7).all()))
torch.cuda.current_stream().synchronize()  # or an Event recorded after the copy
print("read after synchronize, all 7? ", bool((dst == 7).all()))
# --8<-- [end:too-early]
