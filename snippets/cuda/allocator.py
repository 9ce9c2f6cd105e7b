"""The caching allocator: allocated vs reserved, peaks, empty_cache, and an out-of-
memory error."""

import argparse
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

MiB = 2**20


# --8<-- [start:show]
def show(label: str) -> None:
    print(f"{label:22} allocated {torch.cuda.memory_allocated() / MiB:6.0f} MiB"
          f"   reserved {torch.cuda.memory_reserved() / MiB:6.0f} MiB")


show("start")
x = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
show("256 MiB tensor")
del x
show("after del")  # the block stays reserved, ready for reuse
y = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
show("again 256 MiB")  # served from the cache: reserved does not grow
del y
torch.cuda.empty_cache()
show("after empty_cache")  # unused cached blocks go back to the driver
print(f"peak allocated: {torch.cuda.max_memory_allocated() / MiB:.0f} MiB")
# --8<-- [end:show]

# --8<-- [start:oom]
total = torch.cuda.get_device_properties(0).total_memory
try:
    torch.empty(2 * total, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError as e:
    print(type(e).__name__ + ":", str(e).split(".")[0])
show("after the failure")  # nothing leaked
# --8<-- [end:oom]
