"""A non-blocking copy to the host is not finished when the call returns. Needs a GPU.
"""

import argparse
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit(
        "this example needs a GPU: there is no device-to-host copy on a CPU-only "
        "machine"
    )

x = torch.arange(1_000_000, dtype=torch.float32, device="cuda")
expected = x.sum().item()

# --8<-- [start:bug]
# pinned: the copy can really run asynchronously
host = torch.zeros(x.shape, pin_memory=True)
# keep the GPU busy (~0.1 s) so the copy waits in the queue
torch.cuda._sleep(200_000_000)
host.copy_(x, non_blocking=True)  # returns at once: the copy is only queued
print("read at once:        sum =", host.sum().item())  # not copied yet: zeros
# --8<-- [end:bug]

# --8<-- [start:fix]
torch.cuda._sleep(200_000_000)
host.zero_()
host.copy_(x, non_blocking=True)
done = torch.cuda.Event()
done.record()  # marks the point after the copy in the stream
# wait for it (torch.cuda.synchronize() also works, waiting for everything)
done.synchronize()
print("after synchronize(): sum =", host.sum().item(), "| expected", expected)
# --8<-- [end:fix]
