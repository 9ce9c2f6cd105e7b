"""Bytes per parameter on each GPU for weights, gradients and Adam states under DDP,
ZeRO and TP.

Mixed-precision Adam as in the ZeRO paper: 2-byte weights and gradients, plus 12 bytes
of fp32 optimizer state (a master copy of the weights, momentum and variance).
Activations, buffers and temporary all-gather space are not counted."""

import argparse

# --8<-- [start:table]
# bytes per parameter (bf16 weights and grads, fp32 Adam state)
WEIGHTS, GRADS, ADAM = 2, 2, 12


def per_gpu(strategy: str, n: int) -> tuple[float, float, float]:
    """Bytes per parameter on one of n GPUs: (weights, gradients, optimizer states)."""
    return {
        # everything replicated
        "DDP":               (WEIGHTS,     GRADS,     ADAM),
        # optimizer states sharded
        "ZeRO-1":            (WEIGHTS,     GRADS,     ADAM / n),
        "ZeRO-2":            (WEIGHTS,     GRADS / n, ADAM / n),  # + gradients sharded
        "ZeRO-3 / FSDP":     (WEIGHTS / n, GRADS / n, ADAM / n),  # + weights sharded
        # each GPU owns 1/n of each layer
        "TP (all layers)":   (WEIGHTS / n, GRADS / n, ADAM / n),
    }[strategy]


parser = argparse.ArgumentParser()
parser.add_argument("--params", type=float, default=7e9, help="number of parameters")
parser.add_argument("--gpus", type=int, default=8, help="GPUs sharing the model")
args = parser.parse_args()

print(
    f"{args.params / 1e9:g}B parameters on {args.gpus} GPUs, bytes per parameter per "
    "GPU:"
)
print(
    f"{'strategy':<16} {'weights':>8} {'grads':>8} {'Adam':>8} {'total':>8} "
    f"{'GB per GPU':>11}"
)
for name in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP", "TP (all layers)"):
    w, g, o = per_gpu(name, args.gpus)
    total = w + g + o
    print(
        f"{name:<16} {w:>8.2f} {g:>8.2f} {o:>8.2f} {total:>8.2f} "
        f"{total * args.params / 1e9:>11.1f}"
    )
# --8<-- [end:table]
