"""Worked problems: the activations of a transformer on an H100, kept, recomputed or
offloaded (arithmetic, no GPU needed).

Run: python snippets/production/activations_problems.py 1   (or 2, 3)
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3])
args = parser.parse_args()

# --8<-- [start:constants]
# the constants of the collectives chapter's problems (snippets/collectives/problems.py)
PEAK = 1979e12 / 2  # FLOP/s per GPU, dense bf16 (1,979 is with sparsity)
PCIE = 128e9 / 2  # B/s each way between an H100 and its host: PCIe Gen5's 128 GB/s
HBM = 80e9  # bytes of memory per H100 SXM
L, H, A, S, B = 32, 4096, 32, 4096, 1  # layers, hidden size, heads, sequence, batch
sbh = S * B * H


def korthikanti(attention_scores=True):  # bytes per layer, their eq. (1)
    return sbh * (34 + (5 * A * S / H if attention_scores else 0))
# --8<-- [end:constants]


# --8<-- [start:p1]
if args.problem == 1:
    for name, per_layer in [("no checkpointing", korthikanti()),
                            ("no s x s scores kept", korthikanti(False)),
                            ("full checkpointing (layer inputs)", 2 * sbh)]:
        print(f"{name}: {per_layer / 1e9:.3f} GB per layer, "
              f"{L * per_layer / 1e9:.1f} GB for {L} layers")
    print(f"of an H100's {HBM / 1e9:.0f} GB")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    forward = 24 * B * S * H**2 + 4 * B * S**2 * H  # matmul FLOPs of one layer
    step = 3 * forward  # forward, and backward's two products per forward product
    print(f"one layer: forward {forward / PEAK * 1e3:.2f} ms at peak, "
          f"step {step / PEAK * 1e3:.2f} ms")
    print(f"full recomputation: +{forward / step:.1%} FLOPs")
    attention = 4 * B * S**2 * H  # the two products of the attention scores
    print(f"attention scores only: +{attention / step:.1%} FLOPs")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # per token and layer: forward 24h^2 + 4sh FLOPs; copied to the host: c * h bytes.
    # The copy hides behind the forward when c*h / PCIE <= (24h^2 + 4sh) / PEAK:
    for name, c in [("all a fused-attention layer keeps", 34),
                    ("only each checkpointed layer's input", 2)]:
        h = (c * PEAK / PCIE - 4 * S) / 24
        print(f"{name} ({c}h B per token): hidden from h = {h:,.0f}")
    copy, fwd = 34 * sbh / PCIE, (24 * B * S * H**2 + 4 * B * S**2 * H) / PEAK
    print(f"h = {H:,}: copy {copy * 1e3:.1f} ms, forward {fwd * 1e3:.2f} ms per layer")
# --8<-- [end:p3]
