"""A label out of range: a readable IndexError on the CPU, a device-side assert on the
GPU.

Run with: python snippets/troubleshooting/device_assert.py  (on the CPU, any machine)
          CUDA_LAUNCH_BLOCKING=1 python snippets/troubleshooting/device_assert.py --cuda
"""

import argparse
import sys
import traceback

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--cuda", action="store_true", help="run the same step on the GPU")
args = parser.parse_args()
if args.cuda and not torch.cuda.is_available():
    sys.exit("--cuda needs a GPU: torch.cuda.is_available() is False here")
device = torch.device("cuda" if args.cuda else "cpu")


# --8<-- [start:step]
def step(device, labels):
    logits = torch.randn(4, 10, device=device)  # 10 classes: labels 0..9
    loss = F.cross_entropy(logits, labels.to(device))
    return loss.item()


labels = torch.tensor([1, 2, 10, 3])  # 10 is out of range
# --8<-- [end:step]


# --8<-- [start:where]
# CPU: IndexError. GPU: torch.AcceleratorError, a RuntimeError (plain before torch 2.8)
try:
    step(device, labels)
except (IndexError, RuntimeError) as e:
    mine = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == __file__]
    print(f"{type(e).__name__} on {device.type}: {str(e).splitlines()[0]}")
    print(f"  raised at: {mine[-1].line}")
# --8<-- [end:where]
if args.cuda:  # after a device-side assert, every CUDA call of this process fails
    print("this process can no longer use the GPU: fix the data, start a new process")
    sys.exit(0)

# --8<-- [start:fix]
labels = torch.tensor([1, 2, 9, 3])  # the data fixed
if labels.min() < 0 or labels.max() >= 10:  # a cheap check, on the CPU, before the GPU
    sys.exit(f"labels out of range: {labels.tolist()}")
torch.manual_seed(0)
print(f"fixed labels on {device.type}: loss {step(device, labels):.4f}")
# --8<-- [end:fix]
