"""Fragmentation in the caching allocator, and what expandable_segments changes."""

import argparse
import os
import subprocess
import sys

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
args = parser.parse_args()
if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")
MiB = 2**20

# --8<-- [start:fragment]
if args.child:
    x = None
    for k in range(1, 9):  # a batch that grows: 20, 40, ... 160 MiB
        del x  # the old block is free before the larger request
        x = torch.empty(k * 20 * MiB, dtype=torch.uint8, device="cuda")
    print(f"  allocated {torch.cuda.memory_allocated() / MiB:4.0f} MiB,"
          f" reserved {torch.cuda.memory_reserved() / MiB:4.0f} MiB,"
          f" peak reserved {torch.cuda.max_memory_reserved() / MiB:4.0f} MiB")
else:
    for conf in ("", "expandable_segments:True", "max_split_size_mb:32"):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        print(f"PYTORCH_CUDA_ALLOC_CONF={conf!r}", flush=True)
        # the setting is read when CUDA starts: one fresh process per setting
        subprocess.run([sys.executable, __file__, "--child"], env=env, check=True)
# --8<-- [end:fragment]
