"""cuDNN autotuning and determinism: the switches, their defaults, and what they change.

Run with: python snippets/cuda/determinism.py
"""

import argparse
import os

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:switches]
print("cudnn.benchmark:", torch.backends.cudnn.benchmark)  # autotune conv algorithms
print("cudnn.deterministic:", torch.backends.cudnn.deterministic)
print("deterministic algorithms:", torch.are_deterministic_algorithms_enabled())
# --8<-- [end:switches]

# --8<-- [start:check]
device = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator().manual_seed(0)
x = torch.randn(1 << 16, generator=g).to(device)
idx = torch.randint(0, 8, (1 << 16,), generator=g).to(device)
sums = [torch.zeros(8, device=device).index_add_(0, idx, x) for _ in range(5)]
print(f"index_add_ on {device}, 5 runs bit-identical:",
      all(torch.equal(s, sums[0]) for s in sums))  # atomic adds on a GPU: not always

torch.use_deterministic_algorithms(True)  # deterministic kernels, or an error
try:
    a = torch.randn(64, 64, device=device)
    (a @ a).sum().item()
    print(f"matmul on {device} with deterministic algorithms: ok")
except RuntimeError as e:  # CUDA: cuBLAS needs a fixed workspace
    print("RuntimeError:", str(e).split(".")[0] + ".")
    print("CUBLAS_WORKSPACE_CONFIG is", os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
          "- set it to :4096:8 before the program starts")
torch.use_deterministic_algorithms(False)
# --8<-- [end:check]
