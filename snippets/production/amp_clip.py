"""Gradient clipping under float16 autocast: why scaler.unscale_(opt) comes before
clip_grad_norm_, checked against the same step without loss scaling."""

import argparse
import sys

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
MAX_NORM, SCALE = 1.0, 2.0**10  # clip_grad_norm_ max_norm; a scale that fits here
torch.manual_seed(0)
x = torch.randn(64, 16, device=device)
y = 10 * x.sum(-1, keepdim=True)  # large errors at first: the clip acts


def make():  # the same model every time
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# --8<-- [start:step]
def step(scaled, unscale, poison=False):
    """One SGD step under float16 autocast: the norm clip_grad_norm_ saw, weights."""
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=SCALE, enabled=scaled)
    with torch.autocast(device, dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    if poison:  # an overflow in one gradient, as a bad batch gives
        model[0].weight.grad[0, 0] = float("inf")
    if unscale:
        scaler.unscale_(opt)  # divides the gradients by the scale, notes any inf/NaN
    norm = nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    scaler.step(opt)  # skips the step if unscale_ found inf/NaN; never unscales twice
    scaler.update()
    return norm.item(), flat(model)
# --8<-- [end:step]


# --8<-- [start:compare]
start = flat(make())
true_norm, reference = step(scaled=False, unscale=False)  # no scaler: true gradients
print(f"true gradient norm {true_norm:.4g}, max_norm {MAX_NORM}: the clip acts")
wrong_norm, wrong = step(scaled=True, unscale=False)
ratio = wrong_norm / true_norm
print(f"without unscale_: clip_grad_norm_ saw {ratio:.0f} times the true norm\n  "
      + (f"(== {SCALE:.0f}: the scale)" if ratio == SCALE else
         f"(!= {SCALE:.0f}: not the scale)"))
shrink = (wrong - start).norm().item() / (reference - start).norm().item()
print(f"  the update it let through, relative to the right one: {shrink:.2e}\n    "
      + (f"(< {2 / SCALE:.1e}: about 1/scale)" if shrink < 2 / SCALE else
         f"(>= {2 / SCALE:.1e}: not shrunk by the scale)"))
right_norm, right = step(scaled=True, unscale=True)
diff = (right - reference).abs().max().item()
print(f"with unscale_: norm {right_norm:.4g}; weights vs the step without scaling:\n"
      f"  max abs diff {diff:.1e} "
      + ("(== 0: bit-identical)" if diff == 0 else "(!= 0: not bit-identical)"))
inf_norm, skipped = step(scaled=True, unscale=True, poison=True)
moved = (skipped - start).abs().max().item()
print(f"an inf gradient: clip_grad_norm_ returned {inf_norm}; the step was skipped,\n"
      f"  weights moved by {moved:.1e} "
      + ("(== 0: untouched)" if moved == 0 else "(!= 0: the step was NOT skipped)"))
if ratio != SCALE or shrink >= 2 / SCALE or diff != 0 or moved != 0:
    sys.exit("a check failed: see the lines above")
# --8<-- [end:compare]
