"""Worked problems: what FSDP costs for a 13B model on 64 H100 GPUs (arithmetic, no GPU
needed).

Run: python snippets/model_parallel/fsdp_problems.py 1   (or 2, 3)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter's problems (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
NVLINK = 900e9 / 2  # B/s per GPU and direction: NVLink's 900 GB/s counts both
NIC = 400e9 / 8  # B/s per GPU and direction: one 400 Gb/s InfiniBand NIC per GPU
HBM = 80e9  # bytes of memory per H100 SXM
P, NODES, PER_NODE = 13e9, 8, 8  # parameters; nodes of eight GPUs
N = NODES * PER_NODE  # 64 GPUs, one FSDP rank each
B = 2 * P  # bytes of the weights, and of the gradients, in bf16


def gathered(nbytes, n):  # bytes each GPU sends in a ring all-gather or reduce-scatter
    return (n - 1) / n * nbytes
# --8<-- [end:constants]


# --8<-- [start:p1]
if args.problem == 1:
    for name, sent in [("FSDP, reshard_after_forward=True", 3 * gathered(B, N)),
                       ("FSDP, reshard_after_forward=False", 2 * gathered(B, N)),
                       ("DDP (if it fitted)", 2 * gathered(B, N))]:
        print(f"{name}: {sent / 1e9:,.2f} GB per GPU per step")
    # False keeps every unit's gathered weights from its forward to its backward
    print(f"reshard_after_forward=False, held after forward: {B / 1e9:.1f} GB per GPU")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    W, G, ADAM = 2, 2, 12  # bytes per parameter, as in memory.py (the ZeRO paper's)
    for name, per_param in [("DDP", W + G + ADAM), ("ZeRO-1", W + G + ADAM / N),
                            ("ZeRO-2", W + (G + ADAM) / N),
                            ("ZeRO-3 / FSDP", (W + G + ADAM) / N)]:
        total = per_param * P
        left = f"{(HBM - total) / 1e9:.2f} GB left" if total < HBM else "does not fit"
        print(f"{name}: {per_param:.2f} B per parameter, {total / 1e9:.2f} GB: {left}")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # one collective over all 64 GPUs, as a pipeline of two phases (collectives chapter,
    # problem 4): NVLink inside the node, and the network, where each GPU's own NIC
    # carries its 1/8 of what crosses between the nodes; the slower sets the time
    nvlink = gathered(B, PER_NODE) / NVLINK
    network = gathered(B / PER_NODE, NODES) / NIC
    one = max(nvlink, network)  # seconds for one all-gather or reduce-scatter of B
    print(f"one all-gather of the weights: NVLink {nvlink * 1e3:.1f} ms, "
          f"network {network * 1e3:.1f} ms")
    # forward: 2 FLOP per parameter and token against one all-gather; backward: 4
    # against an all-gather and a reduce-scatter. Both cross over at the same tokens:
    tokens = one * PEAK / (2 * P)
    print(f"crossover: {tokens:,.0f} tokens per GPU")
    step = 6 * P * 4096 / PEAK
    print(f"one 4,096-token sequence per GPU: compute {step * 1e3:.1f} ms, "
          f"communication {3 * one * 1e3:.1f} ms")
    book = 990e12 / 400e9  # the Scaling Book's C / W across nodes, for DP and ZeRO
    print(f"Scaling Book: {book:,.0f}; times (8-1)/8 for 8 nodes: {book * 7 / 8:,.0f}")
    slow = gathered(B, NODES) / (100e9 / 8) * PEAK / (2 * P)  # one 100 Gb/s NIC a node
    print(f"one 100 Gb/s NIC per node instead: {slow:,.0f} tokens per GPU")
# --8<-- [end:p3]
