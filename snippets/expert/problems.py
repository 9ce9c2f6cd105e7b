"""Worked problems: expert parallelism on H100 nodes (arithmetic, no GPU needed).

Run: python snippets/expert/problems.py 1   (or 2, 3)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter's problems (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
NVLINK = 900e9 / 2  # B/s per GPU and direction: NVLink's 900 GB/s counts both
NIC = 400e9 / 8  # B/s per GPU and direction: one 400 Gb/s InfiniBand adapter per GPU
# Mixtral 8x7B (arXiv 2401.04088, Table 1): hidden size, expert hidden size, layers,
# experts, experts per token; each expert a SwiGLU MLP of 3 matrices of H x F
H, F, LAYERS, E, K = 4096, 14336, 32, 8, 2
N, TOKENS = 8, 4096  # GPUs in the EP group, one expert each; tokens per GPU and step


def all_to_all(tokens, k, h, n):
    """Bytes one GPU sends in one all-to-all of bf16 rows, routing uniform: n-1 of every
    n (token, expert) pairs go to another GPU."""
    return tokens * k * (n - 1) / n * h * 2
# --8<-- [end:constants]


# --8<-- [start:p1]
if args.problem == 1:
    expert = 3 * H * F  # parameters of one expert
    print(f"one expert: {expert / 1e6:,.1f} M parameters; all experts of all layers: "
          f"{E * LAYERS * expert / 1e9:,.1f} B")
    print(f"expert weights per GPU, bf16: {E * LAYERS * expert * 2 / 1e9:,.1f} GB "
          f"replicated, {E // N * LAYERS * expert * 2 / 1e9:,.1f} GB with EP={N}")
    a2a = all_to_all(TOKENS, K, H, N)
    print(f"one all-to-all (dispatch or return): {a2a / 1e6:,.1f} MB per GPU")
    print(f"per layer and step (2 forward, 2 backward): {4 * a2a / 1e6:,.1f} MB; "
          f"{LAYERS} layers: {LAYERS * 4 * a2a / 1e9:,.2f} GB")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    a2a = all_to_all(TOKENS, K, H, N)
    compute = TOKENS * K * 2 * 3 * H * F / PEAK  # forward FLOPs of the experts, at peak
    for link, bw in [("NVLink", NVLINK), ("InfiniBand", NIC)]:
        print(f"{link}: dispatch + return {2 * a2a / bw * 1e3:.2f} ms per layer "
              f"(forward), {LAYERS * 4 * a2a / bw * 1e3:.1f} ms per step")
    print(f"expert compute at peak: {compute * 1e3:.2f} ms per layer (forward), "
          f"{3 * LAYERS * compute * 1e3:.1f} ms per step")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # per (token, expert) pair: compute 6 H F FLOP forward, 3 times that per step;
    # all-to-all: 2 rows of 2 H bytes forward, 4 per step, (n-1)/n of them sent away
    def crossover(bw, n, step):  # F at which compute time equals all-to-all time
        flops, moves = (18, 8) if step else (6, 4)
        return moves * (n - 1) / n * PEAK / (flops * bw)

    for step, when in [(False, "forward"), (True, "forward and backward")]:
        print(f"crossover F, {when}: NVLink {crossover(NVLINK, N, step):,.0f}, "
              f"InfiniBand {crossover(NIC, N, step):,.0f}")
    # DeepSeek-V3 (arXiv 2412.19437; config.json): 256 routed experts of F = 2,048,
    # 8 per token, trained with 64-way expert parallelism across 8 nodes
    for model, f, n in [("Mixtral 8x7B", F, N), ("DeepSeek-V3", 2048, 64)]:
        nv, ib = f / crossover(NVLINK, N, True), f / crossover(NIC, n, True)
        print(f"{model} (F = {f:,}): compute / all-to-all per step:\n"
              f"  EP={N} on NVLink {nv:.2f}, EP={n} on InfiniBand {ib:.2f}")
    book = 8 * 990e12 / 400e9  # Scaling Book: F > 8 C / W_node, 2-matrix MLP, forward
    print(f"Scaling Book: F > 8 C / W_node = {book:,.0f} (2 matrices);\n  3 matrices: "
          f"{book * 2 / 3:,.0f}; times 7/8: {book * 2 / 3 * 7 / 8:,.0f}")
# --8<-- [end:p3]
