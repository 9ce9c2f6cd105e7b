"""What this process can see. CUDA_VISIBLE_DEVICES hides GPUs and renumbers the rest
from 0."""

import argparse
import os

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:visible]
for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
    print(f"{var} = {os.environ.get(var, '(not set)')!r}")
print("GPUs this process can use:", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    props = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} = {props.name}, {props.total_memory / 2**30:.0f} GiB")
# --8<-- [end:visible]
