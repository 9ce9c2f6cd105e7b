"""A host-to-device copy on a side stream overlaps with compute on the default stream.
"""

import argparse
import sys
import time

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

torch.manual_seed(0)
a = torch.randn(4096, 4096, device="cuda")
host = torch.randn(128 * 2**20).pin_memory()  # 512 MiB in pinned host memory
side = torch.cuda.Stream()
matmuls = 1  # set below so that the compute takes about as long as the copy


def compute():
    for _ in range(matmuls):
        a @ a


# --8<-- [start:serial]
def serial() -> torch.Tensor:
    compute()
    return host.to("cuda", non_blocking=True)  # same stream: waits for compute
# --8<-- [end:serial]


# --8<-- [start:overlap]
def overlapped() -> torch.Tensor:
    main = torch.cuda.current_stream()
    side.wait_stream(main)  # the side stream starts after what is already queued
    with torch.cuda.stream(side):
        dev = host.to("cuda", non_blocking=True)  # allocated and filled on `side`
    compute()  # queued on the default stream, runs alongside the copy
    main.wait_stream(side)  # later work on the default stream sees the copied data
    # `dev` is used on `main` too: keep its memory until main is done
    dev.record_stream(main)
    return dev
# --8<-- [end:overlap]


def timed(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3 / reps


# --8<-- [start:measure]
_, copy_ms = timed(lambda: host.to("cuda", non_blocking=True))
_, matmul_ms = timed(lambda: a @ a)
# equal parts: where overlap saves the most
matmuls = max(1, round(copy_ms / matmul_ms))
_, compute_ms = timed(compute)
out_serial, serial_ms = timed(serial)
out_overlap, overlap_ms = timed(overlapped)
assert torch.equal(out_serial, out_overlap)
best = max(compute_ms, copy_ms) / (compute_ms + copy_ms)  # perfect overlap
print(
    torch.cuda.get_device_name(),
    f"| matmuls 4096^2 + a 512 MiB copy to the GPU | matmuls calibrated: {matmuls}",
)
print(f"compute alone: {compute_ms:8.2f} ms, copy alone: {copy_ms:8.2f} ms")
print(f"serial:        {serial_ms:8.2f} ms")
print(f"overlapped:    {overlap_ms:8.2f} ms")
print(f"overlapped / serial: {overlap_ms / serial_ms:.2f}x; "
      f"best possible, max / sum of the two: {best:.2f}x")
# --8<-- [end:measure]
