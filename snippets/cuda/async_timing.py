"""Kernels are queued: a wall clock without synchronize() measures the queueing, not the
work."""

import argparse
import sys
import time

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

torch.manual_seed(0)
x = torch.randn(8192, 8192, device="cuda")
x @ x  # warm-up: the first call also loads the kernel
torch.cuda.synchronize()

# --8<-- [start:wrong]
t0 = time.perf_counter()
y = x @ x  # returns as soon as the kernel is queued
no_sync_ms = (time.perf_counter() - t0) * 1e3
# --8<-- [end:wrong]
torch.cuda.synchronize()

# --8<-- [start:sync]
torch.cuda.synchronize()  # start from an empty queue
t0 = time.perf_counter()
y = x @ x
torch.cuda.synchronize()  # wait for the GPU before reading the clock
sync_ms = (time.perf_counter() - t0) * 1e3
# --8<-- [end:sync]

# --8<-- [start:events]
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record()  # both events are queued on the current stream, around the work
y = x @ x
end.record()
end.synchronize()  # wait until the GPU has passed `end`
event_ms = start.elapsed_time(end)
# --8<-- [end:events]

print(torch.cuda.get_device_name(), "| 8192 x 8192 float32 matmul")
print(f"wall clock, no synchronize: {no_sync_ms:9.3f} ms")
print(f"wall clock, synchronize:    {sync_ms:9.3f} ms")
print(f"CUDA events:                {event_ms:9.3f} ms")
print(f"no-synchronize / events: {no_sync_ms / event_ms:.3f}x")
