"""Why DataParallel is slow and unbalanced: what it copies every step, and where it
piles up."""

import argparse
import time

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

BATCH, FEATURES, HIDDEN, CLASSES = 512, 512, 2048, 8192
MiB = 2**20


def make_model(device):
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)
    ).to(device)


# --8<-- [start:traffic]
# Sizes only: a model on the "meta" device has shapes but no memory, so this runs
# anywhere.
params = sum(p.numel() for p in make_model("meta").parameters())
param_mib = params * 4 / MiB  # float32
out_mib = BATCH * CLASSES * 4 / MiB  # the logits of one batch
print(
    f"model: {params:,} parameters = {param_mib:.0f} MiB; logits of a batch of "
    f"{BATCH}: {out_mib:.0f} MiB"
)
print("per training step, computed from these sizes (MiB):")
print("  GPUs | params copied | grads reduced | logits on | logits on each")
print("       | out of GPU 0  | into GPU 0    |     GPU 0 |      other GPU")
for n in (2, 4, 8):
    # one replica for each of the other n - 1 GPUs, every step
    copies = param_mib * (n - 1)
    # its own share, plus the whole batch gathered for the loss
    gpu0 = out_mib / n + out_mib
    print(f"  {n:4d} | {copies:13.0f} | {copies:13.0f} | {gpu0:9.0f} | "
          f"{out_mib / n:14.0f}")
# --8<-- [end:traffic]


# --8<-- [start:measure]
def step(model, x, y):
    # the loss is computed on the output device
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    model.zero_grad(set_to_none=True)


n = torch.cuda.device_count()
if n >= 2:
    x = torch.randn(BATCH, FEATURES, device="cuda:0")
    y = torch.randint(CLASSES, (BATCH,), device="cuda:0")
    dp = nn.DataParallel(make_model("cuda:0"))
    step(dp, x, y)  # warm-up
    for i in range(n):
        torch.cuda.synchronize(i)
        torch.cuda.reset_peak_memory_stats(i)
    t0 = time.perf_counter()
    for _ in range(10):
        step(dp, x, y)
    for i in range(n):
        torch.cuda.synchronize(i)
    dp_ms = (time.perf_counter() - t0) / 10 * 1e3
    print(
        f"measured on {n} GPUs ({torch.cuda.get_device_name(0)}), peak memory during "
        "a DP step:"
    )
    for i in range(n):
        print(f"  cuda:{i}: {torch.cuda.max_memory_allocated(i) / MiB:.0f} MiB")
    one = make_model("cuda:1")
    xs, ys = x[: BATCH // n].to("cuda:1"), y[: BATCH // n].to("cuda:1")
    step(one, xs, ys)
    torch.cuda.synchronize(1)
    t0 = time.perf_counter()
    for _ in range(10):
        step(one, xs, ys)
    torch.cuda.synchronize(1)
    one_ms = (time.perf_counter() - t0) / 10 * 1e3
    print(
        f"  DP step on batch {BATCH}: {dp_ms:.2f} ms; one GPU alone on its share "
        f"({BATCH // n}): {one_ms:.2f} ms"
    )
else:
    print(
        f"{n} GPU(s) here: nothing to measure; the numbers above are computed, not "
        "measured"
    )
# --8<-- [end:measure]
