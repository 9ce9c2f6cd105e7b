"""FP8 on any machine: the range and precision of float8_e4m3fn and float8_e5m2, and
the error of tensor-wise and row-wise scaling against bfloat16 on activations with
outliers."""

import argparse
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:formats]
FORMATS = (torch.float32, torch.bfloat16, torch.float16,
           torch.float8_e4m3fn, torch.float8_e5m2)
for dtype in FORMATS:
    fi = torch.finfo(dtype)  # eps: the gap after 1.0; below smallest_normal the gaps
    print(f"{str(dtype)[6:]:>13}: {fi.bits:2d} bits, max {fi.max:.4g}, "  # stay equal
          f"smallest normal {fi.smallest_normal:.3g},\n{'':15}smallest subnormal "
          f"{fi.smallest_normal * fi.eps:.3g}, eps {fi.eps:.3g}")
# --8<-- [end:formats]

# --8<-- [start:data]
torch.manual_seed(0)
x = torch.randn(256, 1024)  # 256 tokens, 1,024 features, typical magnitude 1
x[:, :4] *= 20  # 4 outlier features, in every token
x[0, 4:6] = 10_000  # one token with two massive activations
x = x.bfloat16().float()  # the activations as training holds them: bfloat16
ordinary = x[1:]  # the other 255 tokens
# --8<-- [end:data]


# --8<-- [start:scaling]
def fp8(x, dtype, rowwise):
    """Scale so that the largest |value| lands on the format's max, cast, scale back."""
    top = torch.finfo(dtype).max
    amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()
    scale = top / amax.clamp(min=1e-12)  # torchao's amax_to_scale, in float32
    return (x * scale).clamp(-top, top).to(dtype).float() / scale


def report(name, y, bound, zeros):
    err = ((y[1:] - ordinary).norm() / ordinary.norm()).item()  # relative RMS
    zero = ((y[1:] == 0) & (ordinary != 0)).float().mean().item()  # flushed to 0
    op, limit = zeros.split(":")[0].split()  # "> 0.01: underflow" -> ">", "0.01"
    met = zero > float(limit) if op == ">" else zero < float(limit)
    zeros = zeros if met else f"{'<=' if op == '>' else '>='} {limit}: outside"
    print(f"{name:>17}: relative error {err:.2e} ({'<' if err < bound else '>='} "
          f"{bound}), flushed to zero {zero:.1e}\n{'':19}({zeros})")
    return err, zero


# --8<-- [end:scaling]


# --8<-- [start:compare]
print(f"scales: tensor-wise amax {x.abs().amax():,.0f}; row-wise amax, median row "
      f"{x.abs().amax(dim=-1).median():.1f}")
results = {}
for label, dtype, rowwise, bound, zeros in [  # the bounds each figure must meet
        ("e4m3 tensor-wise", torch.float8_e4m3fn, False, 0.05, "> 0.01: underflow"),
        ("e4m3 row-wise", torch.float8_e4m3fn, True, 0.05, "< 0.001"),
        ("e5m2 tensor-wise", torch.float8_e5m2, False, 0.1, "< 0.001"),
        ("e5m2 row-wise", torch.float8_e5m2, True, 0.1, "< 0.001")]:
    results[label] = report(label, fp8(x, dtype, rowwise), bound, zeros)
# the cost of bfloat16 itself, for scale: float32 activations cast to bfloat16
torch.manual_seed(0)
x32 = torch.randn(256, 1024)
err = ((x32.bfloat16().float() - x32).norm() / x32.norm()).item()
print(f"bfloat16 vs float32: relative error {err:.2e} "
      f"({'<' if err < 0.005 else '>='} 0.005)")
flushed = [z for _, z in results.values()]  # the zeros column, in the order above
if not (flushed[0] > 0.01 and max(flushed[1:]) < 0.001) or err >= 0.005:
    sys.exit("a figure is outside its bound: see the lines above")
# --8<-- [end:compare]
