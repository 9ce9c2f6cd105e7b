"""DataParallel hands its threads autocast on or off, not the dtype: bf16 becomes fp16.

Run with: python snippets/dp/autocast_dtype.py
"""

import argparse
import threading

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()


# --8<-- [start:thread]
def in_a_new_thread(fn):
    out = {}
    worker = threading.Thread(target=lambda: out.update(value=fn()))
    worker.start()
    worker.join()
    return out["value"]


# what torch.autocast("cuda", dtype=torch.bfloat16) sets on entry, for this thread only
torch.set_autocast_dtype("cuda", torch.bfloat16)
print("this thread: autocast dtype for cuda", torch.get_autocast_dtype("cuda"))
print("a new thread:", in_a_new_thread(lambda: torch.get_autocast_dtype("cuda")))
torch.set_autocast_dtype("cuda", torch.float16)  # back to the default
# --8<-- [end:thread]


# --8<-- [start:dp]
class AutocastInside(nn.Module):
    """The fix: enter autocast inside forward, which runs in the replica's thread."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.inner(x)


if torch.cuda.is_available():
    model = nn.Linear(8, 8).cuda()
    x = torch.randn(4, 8, device="cuda")
    two = [0, 0] if torch.cuda.device_count() < 2 else [0, 1]  # replicas may share
    with torch.autocast("cuda", dtype=torch.bfloat16):
        print("the module itself:      ", model(x).dtype)
        dp = nn.DataParallel(model, device_ids=two)
        print("DataParallel:           ", dp(x).dtype)
    fixed = nn.DataParallel(AutocastInside(model), device_ids=two)
    print("autocast inside forward:", fixed(x).dtype)
else:
    print("no GPU: DataParallel's threads need one (the GPU tab shows the real run)")
# --8<-- [end:dp]
