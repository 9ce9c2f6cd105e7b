"""Operations that make the host wait for the GPU, measured inside a small training
loop."""

import argparse
import contextlib
import io
import statistics
import sys
import time
import warnings

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(256, 1024, device="cuda")


def step() -> torch.Tensor:
    opt.zero_grad(set_to_none=True)
    out = model(x)
    loss = out.square().mean()
    loss.backward()
    opt.step()
    return out


# --8<-- [start:variants]
def nothing(out, log):
    log.append(out.detach().mean())  # stays on the GPU


def item(out, log):
    log.append(out.mean().item())  # waits for the GPU


def cpu(out, log):
    log.append(out.mean().cpu())  # waits too


def printing(out, log):
    print(out.mean())  # formatting needs the value: waits


def nonzero(out, log):
    log.append((out > 3).nonzero().shape[0])  # output size depends on the data: waits
# --8<-- [end:variants]


def run(variant, steps=200) -> float:
    log = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    # keep the printed tensors off the screen
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(steps):
            variant(step(), log)
    if variant is nothing:
        torch.stack(log).cpu()  # read the GPU-side log once, at the end
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def cost(variant, reps=5, steps=200) -> float:
    """Median over interleaved repeats of (time with the variant) / (time without)."""
    return statistics.median(
        run(variant, steps) / run(nothing, steps) for _ in range(reps)
    )


# A sync per step costs the most when the GPU's work per step takes about as long as the
# host's work to launch it: then it stops them from overlapping. Pick such a batch size.
def cost_at(batch) -> float:
    global x
    x = torch.randn(batch, 1024, device="cuda")
    return cost(item, reps=3, steps=50)


run(nothing, 20)  # warm-up
best = max((64, 256, 1024, 4096), key=cost_at)
x = torch.randn(best, 1024, device="cuda")

# --8<-- [start:measure]
print(torch.cuda.get_device_name(),
      f"| 200 training steps, median of 5 | batch calibrated: {best}")
for variant in (item, cpu, printing, nonzero):
    print(f"{variant.__name__:9} vs keeping it on the GPU: {cost(variant):.2f}x")
print("a sync alone costs at most 2.00x, when host and GPU take equal time per step "
      "(printing also formats on the host)")
# --8<-- [end:measure]

# --8<-- [start:debug]
torch.cuda.set_sync_debug_mode("warn")  # report every synchronizing call
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    step().mean().item()
torch.cuda.set_sync_debug_mode("default")
print("sync debug mode caught:", [str(w.message) for w in caught])
# --8<-- [end:debug]
