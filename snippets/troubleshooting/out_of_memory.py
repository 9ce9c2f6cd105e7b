"""torch.OutOfMemoryError, and backing off to a batch that fits. Needs a GPU."""

import argparse
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("this example needs a GPU: CUDA out of memory can only happen on one")

free, total = torch.cuda.mem_get_info()
row = 4096 * 4  # one row of 4096 float32 values, in bytes

# --8<-- [start:oom]
batch = 2 * total // row  # twice the GPU's memory: cannot fit
try:
    x = torch.empty(batch, 4096, device="cuda")
except torch.OutOfMemoryError as e:
    # the message goes on with what is free and which processes hold memory: it varies
    print("torch.OutOfMemoryError:", str(e).split(" of which")[0])
# --8<-- [end:oom]

# --8<-- [start:fix]
while True:
    try:
        x = torch.empty(batch, 4096, device="cuda")
        break
    except torch.OutOfMemoryError:  # raised only after the allocator freed its cache
        batch //= 2  # and retried, so empty_cache() here would not help
print(f"fits: {batch * row / total:.0%} of the GPU's memory in one tensor")
# --8<-- [end:fix]
