"""Worked problems: context parallelism for 128k-token sequences on H100 nodes
(arithmetic, no GPU needed).

Run: python snippets/context/problems.py 1   (or 2, 3)
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
S = 128 * 1024  # tokens in one sequence, the batch of one step
LAYERS, HEADS, HEAD_DIM = 32, 32, 128  # a model of hidden size 4,096
HID = HEADS * HEAD_DIM
BF16 = 2  # bytes per value
# --8<-- [end:constants]


def gb(b: float) -> str:
    return f"{b / 1e9:,.2f} GB"


# --8<-- [start:p1]
if args.problem == 1:
    # Korthikanti et al.: 34*s*h bytes per layer and sequence (16-bit values), plus
    # 5*heads*s*s for the attention scores, which a flash-style kernel never keeps
    per_layer = 34 * S * HID
    print(f"activations per layer, whole sequence: {gb(per_layer)}; "
          f"{LAYERS} layers: {gb(LAYERS * per_layer)}")
    print(f"attention scores per layer, if a kernel kept them: {gb(5 * HEADS * S * S)}")
    for n in [1, 8, 16, 32]:
        print(f"context parallel over {n:>2} GPUs: {S // n:>7,} tokens, "
              f"{gb(LAYERS * per_layer / n)} of activations per GPU")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    n = 8  # GPUs of one node, NVLink
    for kv_heads in [HEADS, 8]:  # every head its own K/V; grouped-query attention
        kv = 2 * (S // n) * kv_heads * HEAD_DIM * BF16  # one rank's K and V block
        ring = (n - 1) * kv  # n - 1 blocks passed on per forward
        # Ulysses: q, k, v to heads and the output back; 1/n of each shard stays put
        ulysses = (n - 1) / n * (S // n) * (2 * HEADS + 2 * kv_heads) * HEAD_DIM * BF16
        print(f"{kv_heads} K/V heads: ring {gb(ring)} per layer and GPU "
              f"({ring / NVLINK * 1e3:.2f} ms at NVLink),\n  Ulysses {gb(ulysses)} "
              f"({ulysses / NVLINK * 1e3:.2f} ms); "
              f"Ulysses over at most {kv_heads} GPUs")
    attention = 4 * S * S * HID / n  # QK^T and PV, 2 FLOP per multiply-add, no mask
    print(f"attention forward per layer and GPU: {attention / PEAK * 1e3:.1f} ms at "
          f"peak, {attention / 2 / PEAK * 1e3:.1f} ms causal")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # one ring step: c = S/n tokens per rank; compute 4*c*c*HID FLOP, transfer one
    # K/V block of 2*c*HID*BF16 = 4*c*HID bytes: hidden while c >= PEAK / bandwidth
    for link, bw in [("NVLink", NVLINK), ("InfiniBand", NIC)]:
        c = PEAK / bw  # causal, zig-zag: each step after the first does half a block
        print(f"{link}: hidden from {c:,.0f} tokens per GPU ({2 * c:,.0f} causal);\n"
              f"  at 40% of peak FLOP/s from {0.4 * c:,.0f} ({0.8 * c:,.0f} causal)")
    for n, link in [(8, "NVLink"), (16, "InfiniBand"), (64, "InfiniBand")]:
        print(f"{S:,} tokens over {n} GPUs: {S // n:,} per GPU, ring across {link}")
# --8<-- [end:p3]
