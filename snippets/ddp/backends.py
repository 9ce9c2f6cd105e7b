"""What runs where: the distributed backends this PyTorch build has, on this machine.

Run with: python snippets/ddp/backends.py
"""

import argparse
import platform

import torch
import torch.distributed as dist

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:check]
print(f"{platform.system()} {platform.machine()}, torch {torch.__version__}")
print("torch.distributed available:", dist.is_available())
for name in ("nccl", "gloo", "mpi", "xccl"):
    check = getattr(dist, f"is_{name}_available", None)  # xccl: Intel GPUs
    print(f"  {name:5}", "yes" if check and check() else "no")
print("CUDA GPUs:", torch.cuda.device_count() if torch.cuda.is_available() else 0)
# --8<-- [end:check]
