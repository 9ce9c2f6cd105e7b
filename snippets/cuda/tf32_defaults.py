"""TF32 switches and their defaults: readable on any machine, CUDA or not."""

import argparse
import textwrap

import torch

argparse.ArgumentParser(description=__doc__).parse_args()

# --8<-- [start:defaults]
b = torch.backends
print("defaults (no setting made yet):")
print("  matmuls:      cuda.matmul.fp32_precision =",
      repr(b.cuda.matmul.fp32_precision), "| allow_tf32 =", b.cuda.matmul.allow_tf32)
print("  convolutions: cudnn.conv.fp32_precision  =", repr(b.cudnn.conv.fp32_precision),
      "| cudnn.allow_tf32 =", b.cudnn.allow_tf32)

torch.set_float32_matmul_precision("high")  # the older switch for matmuls ...
print("after set_float32_matmul_precision('high'): cuda.matmul.fp32_precision =",
      repr(b.cuda.matmul.fp32_precision))  # ... moves the new one too
b.cuda.matmul.fp32_precision = "ieee"  # the new way: full float32 matmuls
b.cudnn.conv.fp32_precision = "ieee"  # and full float32 convolutions (not the default)
print("after setting both to 'ieee':", repr(b.cuda.matmul.fp32_precision),
      repr(b.cudnn.conv.fp32_precision))
try:  # the old and the new switch, both used for matmuls in one process
    print("reading allow_tf32 now:", b.cuda.matmul.allow_tf32)
except RuntimeError as e:  # first sentence of the message, without its preamble
    first = str(e).split(",", 1)[-1].split(".")[0]
    print(textwrap.fill(f"reading allow_tf32 now: RuntimeError: {first}", 80,
                        subsequent_indent="  "))
# --8<-- [end:defaults]
