"""Worked problems: the cost model applied to H100 nodes (arithmetic, no GPU needed).

Run: python snippets/collectives/problems.py 1   (or 2, 3, 4)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3, 4])
args = parser.parse_args()

# --8<-- [start:constants]
# NVIDIA H100 SXM datasheet: BF16 Tensor Core 1,979 TFLOP/s *with sparsity*: half dense
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16
NVLINK = 900e9 / 2  # B/s per GPU and direction: NVLink's 900 GB/s counts both
NIC = 400e9 / 8  # B/s per GPU and direction: one 400 Gb/s InfiniBand NDR NIC per GPU
GPUS_PER_NODE = 8  # DGX H100 / HGX H100


def ring_all_reduce(nbytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce of n ranks."""
    return 2 * (n - 1) / n * nbytes


def ring_gather(nbytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-gather or reduce-scatter of nbytes in all."""
    return (n - 1) / n * nbytes
# --8<-- [end:constants]


def gb(b: float) -> str:
    return f"{b / 1e9:,.2f} GB"


# --8<-- [start:p1]
if args.problem == 1:
    params, n = 7e9, GPUS_PER_NODE
    for dtype, size in [("bf16", 2), ("fp32", 4)]:  # bytes per gradient
        grads = size * params
        sent = ring_all_reduce(grads, n)  # 2(n-1)/n of the gradients
        print(f"{dtype} gradients: {gb(grads)}, each GPU sends {gb(sent)}: "
              f"{sent / NVLINK * 1e3:.1f} ms per step at best")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    params, n = 7e9, GPUS_PER_NODE
    weights = grads = 2 * params  # bf16
    ddp = ring_all_reduce(grads, n)
    gather = ring_gather(weights, n)  # one all-gather of every layer's weights
    scatter = ring_gather(grads, n)  # one reduce-scatter of every gradient
    for name, sent in [("DDP", ddp),  # then FSDP2's two settings, on lines of their own
                       ("FSDP2\n  reshard_after_forward=True", 2 * gather + scatter),
                       ("  reshard_after_forward=False", gather + scatter)]:
        print(f"{name}: {gb(sent)} per GPU, {sent / NVLINK * 1e3:.1f} ms, "
              f"{sent / ddp:.2f} of DDP's bytes")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    n = GPUS_PER_NODE
    # per parameter and token: backward 4 FLOP (the forward's 2, twice), so
    # compute = 4 * P * tokens / PEAK and communication = 2(n-1)/n * 2 * P / NVLINK
    tokens = (n - 1) / n * PEAK / NVLINK  # where they are equal; P cancels out
    print(f"crossover: {tokens:,.0f} tokens per GPU, for any number of parameters")
    print(f"at 40% of peak FLOP/s: {0.4 * tokens:,.0f} tokens per GPU")
    book = 990e12 / 450e9  # the Scaling Book's C/W, its figure for DP in a node
    print(f"Scaling Book: C/W = {book:,.0f} tokens per GPU; "
          f"times (n-1)/n: {book * (n - 1) / n:,.0f}")
# --8<-- [end:p3]

# --8<-- [start:p4]
if args.problem == 4:
    n = GPUS_PER_NODE
    # hierarchical: reduce-scatter inside the node (NVLink), all-reduce of each GPU's
    # 1/n across the nodes (its own NIC), all-gather inside the node; the phases run
    # as a pipeline, so the slower one sets the time. Tokens per GPU where
    # 4 * P * tokens / PEAK equals the phase's time (P cancels out):
    inside = (n - 1) / n * PEAK / NVLINK  # 2(n-1)/n * 2P bytes over NVLink
    for m in [2, 4, 5, 8, 16, 64]:  # nodes
        across = (m - 1) / m * PEAK / (n * NIC)  # 2(m-1)/m * 2P/n bytes per NIC
        which = "NVLink" if inside >= across else "InfiniBand"
        print(f"{m:>2} nodes: {max(inside, across):,.0f} tokens per GPU, set by "
              f"{which} (NVLink {inside:,.0f}, network {across:,.0f})")
    book = 990e12 / 400e9  # the Scaling Book's C/W across nodes; it truncates
    print(f"Scaling Book: {int(book):,} across nodes, {int(book / 2):,} for 2 nodes")
# --8<-- [end:p4]
