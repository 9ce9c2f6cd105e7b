"""Worked problems: FSDP's float8 all-gather for a 13B model on 64 H100 GPUs
(arithmetic, no GPU needed).

Run: python snippets/production/precision_problems.py 1   (or 2, 3)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter's problems (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
PEAK8 = 3958e12 / 2  # FLOP/s per GPU, dense FP8 (3,958 is with sparsity)
NVLINK = 900e9 / 2  # B/s per GPU and direction: NVLink's 900 GB/s counts both
NIC = 400e9 / 8  # B/s per GPU and direction: one 400 Gb/s InfiniBand NIC per GPU
P, NODES, PER_NODE = 13e9, 8, 8  # parameters; nodes of 8 GPUs: FSDP's problems
N = NODES * PER_NODE  # 64 GPUs, one FSDP rank each


def gathered(nbytes, n):  # bytes each GPU sends in a ring all-gather or reduce-scatter
    return (n - 1) / n * nbytes


def seconds(nbytes):  # one all-gather or reduce-scatter of nbytes over all 64 GPUs:
    return max(gathered(nbytes, PER_NODE) / NVLINK,  # NVLink inside the node, then
               gathered(nbytes / PER_NODE, NODES) / NIC)  # each GPU's NIC across nodes
# --8<-- [end:constants]


# --8<-- [start:p1]
if args.problem == 1:
    # per step: all-gather the weights in forward and again in backward, and
    # reduce-scatter the bfloat16 gradients; float8 changes the gathers only
    for name, weight in [("bfloat16 all-gather", 2), ("float8 all-gather", 1)]:
        sent = 2 * gathered(weight * P, N) + gathered(2 * P, N)
        print(f"{name}: {sent / 1e9:.1f} GB sent per GPU per step")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    for name, weight in [("bfloat16", 2), ("float8", 1)]:
        print(f"one all-gather of the weights in {name}: "
              f"{seconds(weight * P) * 1e3:.0f} ms")
    print(f"one reduce-scatter of the bfloat16 gradients: "
          f"{seconds(2 * P) * 1e3:.0f} ms")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # forward: 2 FLOPs per parameter and token against one all-gather; backward: 4
    # against an all-gather and a reduce-scatter. Tokens per GPU where they are equal:
    for name, peak, weight in [("bfloat16", PEAK, 2), ("float8", PEAK8, 1)]:
        fwd = seconds(weight * P) * peak / (2 * P)
        bwd = (seconds(weight * P) + seconds(2 * P)) * peak / (4 * P)
        print(f"{name} compute and all-gather: forward {fwd:,.0f}, "
              f"backward {bwd:,.0f} tokens per GPU")
    book = 990e12 / 400e9  # the Scaling Book's C / W across nodes, in bfloat16
    print(f"Scaling Book, bfloat16: {book:,.0f}; with FP8's C: {2 * book:,.0f}")
# --8<-- [end:p3]
