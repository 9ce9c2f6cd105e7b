"""Worked problems: a 70B model on 256 H100 GPUs, TP inside each node of 8 and FSDP
across the 32 nodes (arithmetic, no GPU needed).

Run: python snippets/model_parallel/twod_problems.py 1   (or 2, 3, 4)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3, 4])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter's problems (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
NVLINK = 900e9 / 2  # B/s per GPU and direction: NVLink's 900 GB/s counts both
IB = 400e9 / 8  # B/s per GPU and direction: one 400 Gb/s InfiniBand adapter each
# Llama 3 70B: 80 layers of width 8,192, feed-forward width 28,672; bf16 throughout
P, LAYERS, D, F = 70e9, 80, 8192, 28672
NODES, TP = 32, 8  # the mesh: dp = 32 nodes (FSDP) x tp = 8 GPUs of a node
SEQ = 4096  # tokens per sequence; each TP group (a node) shares its sequences


def tp_bytes(tokens):  # what each GPU sends per step in TP's ring all-reduces:
    # 4 per layer (2 forward, 2 backward), each of the node's tokens x D in bf16
    return 4 * LAYERS * 2 * (TP - 1) / TP * tokens * D * 2


def fsdp_bytes():  # what each GPU sends per step in FSDP's collectives, over its
    # adapter: all-gather in forward and in backward, reduce-scatter; each of P / TP
    return 3 * (NODES - 1) / NODES * 2 * P / TP


def compute(tokens):  # seconds at peak: 6 FLOP per parameter and token, split over TP
    return 6 * P * tokens / TP / PEAK
# --8<-- [end:constants]


# --8<-- [start:p1]
if args.problem == 1:
    tokens = 8 * SEQ  # per node and step: 8 sequences, 1M tokens over the 32 nodes
    print(f"TP all-reduces over NVLink: {tp_bytes(tokens) / 1e9:,.1f} GB per GPU, "
          f"{tp_bytes(tokens) / NVLINK * 1e3:,.0f} ms")
    print(f"FSDP over InfiniBand: {fsdp_bytes() / 1e9:,.1f} GB per GPU, "
          f"{fsdp_bytes() / IB * 1e3:,.0f} ms")
    print(f"compute at peak: {compute(tokens) * 1e3:,.0f} ms")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    gpus, tokens = NODES * TP, 8 * SEQ
    # FSDP2 with bf16 compute keeps fp32 shards: parameter 4, gradient 4, Adam 4 + 4
    print(f"model state, 16 B per parameter over {gpus} GPUs: {16 * P / gpus / 1e9:.2f}"
          f" GB per GPU\n  (TP alone: {16 * P / TP / 1e9:.0f} GB)")
    layer = 2 * P / LAYERS / TP  # bytes of one layer's TP shard in bf16
    print(f"two gathered layers (FSDP prefetches one): {2 * layer / 1e9:.2f} GB")
    inputs = LAYERS * tokens * D * 2  # each layer's input, kept for recomputation
    print(f"checkpointed layer inputs: {inputs / 1e9:.1f} GB per GPU, "
          f"with sequence parallelism {inputs / TP / 1e9:.1f} GB")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    tokens = 8 * SEQ  # the ratio below does not depend on it: both grow with tokens
    for where, link in (("inside a node (NVLink)", NVLINK),
                        ("one GPU in each of 8 nodes (InfiniBand)", IB)):
        print(f"TP communication / compute, {where}: "
              f"{tp_bytes(tokens) / link / compute(tokens):.2f}")
    print(f"Scaling Book: TP=8 compute-bound while 8 < F*W/C: NVLink "
          f"{F * NVLINK / 990e12:.1f}, InfiniBand {F * IB / 990e12:.2f}")
# --8<-- [end:p3]

# --8<-- [start:p4]
if args.problem == 4:
    # FSDP hides under compute while fsdp_bytes() / IB <= compute(tokens)
    tokens = fsdp_bytes() / IB * TP * PEAK / (6 * P)
    print(f"crossover: {tokens:,.0f} tokens per node, {tokens / TP:,.0f} per GPU")
    print(f"4 sequences per node ({4 * SEQ // TP:,} tokens per GPU): compute "
          f"{compute(4 * SEQ) * 1e3:,.0f} ms, FSDP {fsdp_bytes() / IB * 1e3:,.0f} ms")
    print(f"Scaling Book: C/W = {990e12 / 400e9:,.0f} tokens per GPU across nodes; "
          f"times (M-1)/M: {990e12 / 400e9 * (NODES - 1) / NODES:,.0f}")
# --8<-- [end:p4]
