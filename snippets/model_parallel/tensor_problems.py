"""Worked problems: what tensor parallelism costs for a 70B-class model on H100 nodes
(arithmetic, no GPU needed).

Run: python snippets/model_parallel/tensor_problems.py 1   (or 2, 3, 4)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3, 4])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter's problems (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
NVLINK = 900e9 / 2  # B/s per GPU and direction: NVLink's 900 GB/s counts both
NIC = 400e9 / 8  # B/s per GPU and direction: one 400 Gb/s InfiniBand NDR NIC per GPU
# Llama 3 70B: 80 layers of width 8192; attention with 64 query heads and 8 key/value
# heads of 128; a SwiGLU MLP of 28672, three matrices
H, FF, LAYERS, KV = 8192, 28672, 80, 8 * 128
PL = 2 * H * H + 2 * H * KV + 3 * H * FF  # weights per layer: q, o; k, v; the MLP
TOKENS = 4096  # per micro-batch: one sequence of 4,096 tokens, the same on each rank
S = TOKENS * H * 2  # bytes of one bf16 activation (tokens, H): what an all-reduce sums


def ring_all_reduce(nbytes, n):
    """Bytes each rank sends in a ring all-reduce of n ranks."""
    return 2 * (n - 1) / n * nbytes


def matmuls(y):
    """Seconds of one layer's forward matmuls on each of y GPUs, at peak: 2 FLOP per
    weight and token (attention's scores and weighted sum left out)."""
    return 2 * TOKENS * PL / y / PEAK
# --8<-- [end:constants]


# --8<-- [start:p1]
if args.problem == 1:
    n = 8
    print(f"weights per layer: {PL:,}; 80 layers: {LAYERS * PL / 1e9:.1f} billion")
    print(f"bytes per all-reduce: {S:,} B; per layer 2 in forward, 2 in backward")
    sent = ring_all_reduce(S, n)
    print(f"each GPU sends on a ring: {sent / 1e6:,.1f} MB per all-reduce,\n"
          f"  {4 * sent / 1e6:,.1f} MB per layer, "
          f"{4 * LAYERS * sent / 1e9:,.1f} GB per micro-batch")
    half = (n - 1) / n * S  # an all-gather or a reduce-scatter of S
    print(f"with SP: {half / 1e6:,.1f} MB per all-gather or reduce-scatter, "
          f"8 per layer: {8 * half / 1e6:,.1f} MB")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    n = 8
    comm = ring_all_reduce(S, n) / NVLINK
    print(f"one all-reduce at NVLink's 450 GB/s: {comm * 1e3:.3f} ms")
    print(f"one layer's forward: matmuls {matmuls(n) * 1e3:.3f} ms, "
          f"2 all-reduces {2 * comm * 1e3:.3f} ms")
    compute, comms = 3 * matmuls(n) * LAYERS, 4 * comm * LAYERS  # backward: 2x FLOPs
    print(f"forward and backward, 80 layers: matmuls {compute * 1e3:.1f} ms, "
          f"all-reduces {comms * 1e3:.1f} ms,\n  {comms / (compute + comms):.0%} of "
          f"the time if they do not overlap")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # per layer's forward, TP of y GPUs: matmuls 2 * TOKENS * PL / (y * PEAK),
    # all-reduces 2 * 2(y-1)/y * 2 * TOKENS * H / NVLINK: TOKENS cancels out
    for y in (2, 4, 8, 16):
        ratio = matmuls(y) / (2 * ring_all_reduce(S, y) / NVLINK)
        print(f"TP={y:2}: matmuls / all-reduces = {ratio:.2f}")
    print(f"crossover: TP = {1 + PL * NVLINK / (4 * H * PEAK):.1f}, for any number "
          f"of tokens")
    print(f"MLP per GPU at TP=8: {FF // 8:,} features; C/W = {PEAK / NVLINK:,.0f}")
    scores = 4 * TOKENS * TOKENS * H  # q @ k.T and a @ v, all heads, without a mask
    print(f"attention's scores and weighted sum would add "
          f"{scores / (2 * TOKENS * PL):.1%} to the forward's matmuls")
    book = FF * 450e9 / 990e12  # the Scaling Book's rule, its constants
    print(f"Scaling Book: TP < F*W/C = {book:.1f};\n  on a ring, for its two-matrix "
          f"MLP: TP < 1 + F*W/C = {1 + FF * NVLINK / PEAK:.1f}")
# --8<-- [end:p3]

# --8<-- [start:p4]
if args.problem == 4:
    # TP over m nodes of 8 GPUs, the all-reduce of the collectives chapter's problem
    # 4: reduce-scatter and all-gather inside the node (NVLink), an all-reduce of
    # each GPU's eighth across the nodes (its own NIC); the slower phase sets the time
    inside = ring_all_reduce(S, 8) / NVLINK
    for m in (1, 2, 4, 8):
        across = ring_all_reduce(S / 8, m) / NIC
        comms = 2 * max(inside, across)  # two all-reduces per layer's forward
        print(f"TP={8 * m:2} on {m} node(s): NVLink phase {inside * 1e3:.3f} ms, "
              f"network {across * 1e3:.3f} ms;\n  forward matmuls "
              f"{matmuls(8 * m) * 1e3:.3f} ms, all-reduces {comms * 1e3:.3f} ms")
    print(f"Scaling Book beyond a node: TP < F*W/C = {FF * 400e9 / 990e12:.1f} "
          f"(W = 400 GB/s per node)")
# --8<-- [end:p4]
