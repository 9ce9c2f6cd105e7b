"""torchao's float8 training on any machine: convert_to_float8_training with tensor-wise
and row-wise scaling, its error against bfloat16 and the loss over a few steps."""

import argparse
import logging
import sys
import textwrap

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
# a CPU build of torch cannot load torchao's CUDA kernels, and torchao says so at import
logging.getLogger("torchao").setLevel(logging.ERROR)
logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # and a deprecation
from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402

# float8 products need compute capability 8.9 or newer; elsewhere the CPU computes them
fp8_gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
device = "cuda" if fp8_gpu else "cpu"

# --8<-- [start:convert]
def make(recipe):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64),
                          nn.GELU(), nn.Linear(64, 10))
    model = model.to(device, torch.bfloat16)
    if recipe:  # swap nn.Linear for Float8Linear; torch._scaled_mm needs dims % 16 == 0
        convert_to_float8_training(
            model, config=Float8LinearConfig.from_recipe_name(recipe),
            module_filter_fn=lambda mod, fqn: fqn != "4")  # keep the 10-wide head
    return model
# --8<-- [end:convert]


# --8<-- [start:train]
torch.manual_seed(1)
x = torch.randn(64, 64, device=device, dtype=torch.bfloat16)
y = x[:, :10] * 3  # a target the model can learn
results = {}
for recipe in (None, "tensorwise", "rowwise"):
    model = make(recipe)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    losses = []
    for step in range(10):
        out = model(x)
        if step == 0:
            first = out.float()
        loss = nn.functional.mse_loss(out.float(), y.float())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    results[recipe] = first, losses
    if recipe:
        print(textwrap.fill(f"{recipe}: {model[0]}", 80, subsequent_indent="  ",
                            break_long_words=False, break_on_hyphens=False))
# --8<-- [end:train]

# --8<-- [start:compare]
ref, ref_losses = results[None]
fell = ref_losses[-1] / ref_losses[0]
print(f"bfloat16: final loss / first {fell:.2f} "
      + ("(< 0.5: it learns)" if fell < 0.5 else "(>= 0.5: it does not learn)"))
bad = [] if fell < 0.5 else ["bfloat16"]
for recipe in ("tensorwise", "rowwise"):
    out, losses = results[recipe]
    err = ((out - ref).norm() / ref.norm()).item()
    ratio = losses[-1] / ref_losses[-1]
    print(f"float8 {recipe}: first output vs bfloat16: relative error {err:.1e} "
          f"({'<' if err < 0.1 else '>='} 0.1);\n  final loss / bfloat16's {ratio:.2f} "
          f"({'<' if ratio < 1.2 else '>='} 1.2)")
    if err >= 0.1 or ratio >= 1.2:
        bad.append(recipe)
if bad:
    sys.exit(f"outside the bounds: {', '.join(bad)}")
# --8<-- [end:compare]
