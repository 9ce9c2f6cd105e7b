"""Worked problems: what a DDP step costs on an H100 node (arithmetic, no GPU needed).

Run: python snippets/ddp/problems.py 1   (or 2, 3)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter's problems (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
NVLINK = 900e9 / 2  # B/s per GPU and direction: NVLink's 900 GB/s counts both
P, N = 7e9, 8  # parameters; GPUs in the node, one DDP rank each
GRAD = 2 * P  # bytes all-reduced per step: bf16 gradients, 2 bytes per parameter
CAP = 25 * 1024**2  # DDP's default bucket_cap_mb=25, in bytes
SENT = 2 * (N - 1) / N * GRAD  # bytes each GPU sends in a ring all-reduce
# --8<-- [end:constants]

# --8<-- [start:p1]
if args.problem == 1:
    print(f"bytes all-reduced per step: {GRAD / 1e9:,.1f} GB per GPU")
    print(f"buckets of 25 MiB: about {GRAD / CAP:,.0f}")
    print(f"bytes each GPU sends on a ring: {SENT / 1e9:,.2f} GB")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    print(f"all-reduce at NVLink's 450 GB/s: {SENT / NVLINK * 1e3:.1f} ms per step")
    last = 2 * (N - 1) / N * CAP  # the last bucket: it starts when backward has ended
    print(f"the last 25 MiB bucket alone: {last / NVLINK * 1e3:.2f} ms")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # backward: 4 FLOP per parameter and token; it hides the all-reduce while
    # 4 * P * tokens / PEAK >= SENT / NVLINK
    tokens = SENT / NVLINK * PEAK / (4 * P)
    print(f"crossover: {tokens:,.0f} tokens per GPU")
    backward = 4 * P * 4096 / PEAK
    print(f"one 4,096-token sequence per GPU: backward {backward * 1e3:.1f} ms, "
          f"all-reduce {SENT / NVLINK * 1e3:.1f} ms")
# --8<-- [end:p3]
