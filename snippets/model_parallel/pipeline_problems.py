"""Worked problems: what a pipeline costs for a 70B model over 8 H100 nodes (arithmetic,
no GPU needed).

Run: python snippets/model_parallel/pipeline_problems.py 1   (or 2, 3, 4)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3, 4])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
NIC = 400e9 / 8  # B/s per GPU and direction: one 400 Gb/s InfiniBand NIC per GPU
HBM = 80e9  # bytes of memory per H100 SXM
P, LAYERS, h = 70e9, 80, 8192  # a 70B model of 80 layers, width 8192
p, s, b = 8, 4096, 1  # stages, one per node; sequence length; sequences per micro-batch
BOUNDARY = b * s * h * 2  # bytes of one micro-batch's activation (bf16) between stages


def bubble(m, v=1):  # idle share of a step: GPipe and 1F1B (v = 1), interleaved
    return (p - 1) / (v * m + p - 1)
# --8<-- [end:constants]


# --8<-- [start:p1]
if args.problem == 1:
    send = BOUNDARY / NIC
    forward = 2 * (P / p) * b * s / PEAK  # 2 FLOP per parameter and token
    print(f"one micro-batch at a stage boundary: {BOUNDARY / 1e6:,.1f} MB, "
          f"{send * 1e3:.2f} ms at 50 GB/s")
    print(f"a stage's forward of it: {forward * 1e3:.1f} ms, backward "
          f"{2 * forward * 1e3:.1f} ms;\n"
          f"  the send: {send / forward:.1%} of the forward")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    forward = 2 * (P / p) * b * s / PEAK  # a stage's forward of one micro-batch
    for v, name in [(1, "GPipe and 1F1B"), (2, "interleaved, v=2")]:
        m = next(m for m in range(1, 1000) if bubble(m, v) < 0.1)
        sent = 2 * v * m * BOUNDARY  # a middle rank: v stages, m sends forward, m back
        print(f"{name}: m = {m} ({m * b * s:,} tokens), bubble {bubble(m, v):.1%}")
        busy = 3 * m * forward  # forward and backward of its layers, m micro-batches
        print(f"  a middle rank sends {sent / 1e9:.1f} GB per step, "
              f"{sent / NIC * 1e3:.0f} ms, {sent / NIC / busy:.1%} of the "
              f"{busy:.1f} s it computes")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    layer = 34 * s * b * h  # bytes kept per layer and micro-batch (Korthikanti et al.)
    k = LAYERS // p  # layers per stage
    weights = 16 * P / p  # bf16 weights and gradients, fp32 master and Adam: 16 B each
    print(f"activations per micro-batch and stage: {k * layer / 1e9:.1f} GB")
    print(f"weights, gradients and Adam per rank: {weights / 1e9:.0f} GB; "
          f"an H100 has {HBM / 1e9:.0f} GB")
    v, m = 2, 32  # interleaved: torch's _get_warmup_ops, plus one forward
    held = (v - 1) * (m // max(1, m // p)) + 2 * (p - 1) + 1
    for name, n, layers in [("GPipe, m=64", 64, k), ("1F1B", p, k),
                            ("interleaved, v=2, m=32", held, k // v)]:
        print(f"first rank, {name}: {n} forwards of {layers} layers kept, "
              f"{n * layers * layer / 1e9:,.0f} GB")
# --8<-- [end:p3]

# --8<-- [start:p4]
if args.problem == 4:
    # per micro-batch of t tokens: forward 2 (P/p) t / PEAK, send 2 h t / NIC; t cancels
    crossover = h * PEAK / NIC  # parameters per stage where the two are equal
    print(f"PEAK / NIC = {PEAK / NIC:,.0f};\n  crossover: {crossover / 1e6:,.0f} M "
          f"parameters per stage, {crossover / (12 * h * h):.2f} layers of 12 h^2")
    for width in [1024, 2048, 4096, 8192]:  # a GPT layer: 12 h^2 parameters
        ratio = 12 * width * width * NIC / (width * PEAK)
        print(f"h = {width:>5,}: one layer per stage computes {ratio:.2f}x "
              f"as long as it sends")
# --8<-- [end:p4]
