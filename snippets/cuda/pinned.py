"""Pageable vs pinned host memory: copy bandwidth, and a non-blocking copy read too
early."""

import argparse
import sys

import torch
from torch.utils.data import DataLoader

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

N = 64 * 2**20  # 64 Mi float32 = 256 MiB
pageable = torch.randn(N)


def gb_per_s(copy, reps=10):
    copy()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
        enable_timing=True
    )
    start.record()
    for _ in range(reps):
        copy()
    end.record()
    end.synchronize()
    return N * 4 * reps / (start.elapsed_time(end) / 1e3) / 1e9


def pcie_link():
    """The GPU's PCIe link now (sysfs): its rate per direction in GB/s, and a name."""
    p = torch.cuda.get_device_properties(0)
    try:
        dev = (f"/sys/bus/pci/devices/"
               f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0")
        with open(f"{dev}/current_link_speed") as f:
            gts = float(f.read().split()[0])  # "32.0 GT/s PCIe"
        with open(f"{dev}/current_link_width") as f:
            lanes = int(f.read())
    except (AttributeError, OSError, ValueError):
        return None, "not readable here"
    coding = 8 / 10 if gts < 8 else 128 / 130  # PCIe 1-2 vs 3 and later
    return gts * lanes * coding / 8, f"PCIe x{lanes} at {gts:g} GT/s"


# --8<-- [start:bandwidth]
pinned = pageable.pin_memory()  # pin once, reuse many times
plain = gb_per_s(lambda: pageable.to("cuda"))
fast = gb_per_s(lambda: pinned.to("cuda", non_blocking=True))
# pins a new copy every time
mistake = gb_per_s(lambda: pageable.pin_memory().to("cuda"))
print(torch.cuda.get_device_name(), "| host-to-device, 256 MiB")
print(f"pageable:               {plain:7.1f} GB/s")
print(
    f"pinned:                 {fast:7.1f} GB/s   pinned / pageable: {fast / plain:.2f}x"
)
print(
    f"pin_memory() each time: {mistake:7.1f} GB/s   vs pageable: {mistake / plain:.2f}x"
)
link, name = pcie_link()  # the bound: what the link carries at most, per direction
if link:
    print(f"the link, {name}: {link:.1f} GB/s; pinned / link: {fast / link:.2f}x")
else:
    print(f"the link's nominal rate: {name}")
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
