"""The speed of torchao's float8 training against bfloat16 on one GPU: a compiled MLP's
forward and backward, timed with CUDA events. Needs compute capability 8.9 or newer."""

import argparse
import logging
import sys

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--dim", type=int, default=8192,
                    help="hidden size, a multiple of 16")
parser.add_argument("--tokens", type=int, default=16384, help="tokens per step")
args = parser.parse_args()
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
    found = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
    sys.exit(f"float8 matmuls need a GPU of compute capability 8.9 or newer (Ada, "
             f"Hopper, Blackwell); found: {found}")
logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # a deprecation notice
from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402

# --8<-- [start:time]
def step_ms(recipe):
    torch.manual_seed(0)
    d = args.dim
    model = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(),
                          nn.Linear(4 * d, d, bias=False)).to("cuda", torch.bfloat16)
    if recipe:
        config = Float8LinearConfig.from_recipe_name(recipe)
        convert_to_float8_training(model, config=config)
    model = torch.compile(model)  # fuses the casts to float8 with their neighbours
    x = torch.randn(args.tokens, d, device="cuda", dtype=torch.bfloat16)
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    for i in range(13):  # 3 to compile and warm up, 10 timed
        if i == 3:
            start.record()
        model(x).sum().backward()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 10


# five products of 4 d^2 multiply-adds per token, 2 FLOPs each: the forward's two, the
# two weights' gradients, the second layer's input gradient (x needs none)
flops = 2 * 5 * 4 * args.dim**2 * args.tokens
bf16 = step_ms(None)
print(f"{torch.cuda.get_device_name()}: bfloat16 {bf16:.2f} ms per step, "
      f"{flops / bf16 / 1e9:.0f} TFLOP/s")
for recipe in ("tensorwise", "rowwise"):
    ms = step_ms(recipe)
    print(f"float8 {recipe}: {ms:.2f} ms per step, {flops / ms / 1e9:.0f} TFLOP/s, "
          f"{bf16 / ms:.2f}x bfloat16's speed")
# --8<-- [end:time]
