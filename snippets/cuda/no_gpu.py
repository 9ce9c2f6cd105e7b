"""What CUDA calls do where there is no GPU (and, on a GPU machine, that they simply
work)."""

import argparse
import textwrap
import warnings

import torch
from torch.utils.data import DataLoader

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:calls]
calls = {
    "torch.cuda.is_available()": lambda: torch.cuda.is_available(),
    "torch.cuda.memory_allocated()": lambda: torch.cuda.memory_allocated(),
    "torch.cuda.current_device()": lambda: torch.cuda.current_device(),
    "torch.cuda.synchronize()": lambda: torch.cuda.synchronize(),
    "torch.ones(2).pin_memory()": lambda: torch.ones(2).pin_memory().is_pinned(),
    "torch.cuda.Stream()": lambda: type(torch.cuda.Stream()).__name__,
    "torch.cuda.Event(enable_timing=True)": lambda: type(
        torch.cuda.Event(enable_timing=True)
    ).__name__,
}
for call, run in calls.items():
    try:
        print(f"{call:38} -> {run()!r}")
    except Exception as e:  # noqa: BLE001 - we want to see every kind of failure
        # torch's first sentence, on a line of its own: some add a paragraph of advice
        first = str(e).splitlines()[0].split(". ")[0]
        print(f"{call:38} -> {type(e).__name__}:\n  {first}")
# --8<-- [end:calls]

# --8<-- [start:loader]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader = DataLoader(torch.arange(8.0), batch_size=4, pin_memory=True)
    batch = next(iter(loader))
print("DataLoader(pin_memory=True) batch is pinned:", batch.is_pinned())
print("warnings:", len(caught))
for w in caught:
    print(textwrap.indent(textwrap.fill(str(w.message), 78), "  "))
# --8<-- [end:loader]
