"""What it costs to read the loss back to the host at every step, against once at the
end."""

import argparse
import time

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
start_state = {k: v.clone() for k, v in model.state_dict().items()}
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 256, device=device), torch.randn(128, 1, device=device)


def step() -> torch.Tensor:
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


# --8<-- [start:per-step]
def train_item(steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        losses.append(step().item())  # the host waits for the device at every step
    return losses
# --8<-- [end:per-step]


# --8<-- [start:bulk]
def train_bulk(steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        losses.append(step().detach())  # stays on the device: nothing to wait for
    return torch.stack(losses).tolist()  # one transfer at the end
# --8<-- [end:bulk]


# the GPU effect needs a few hundred steps to show; on the CPU there is none to show
STEPS = 300 if device.type == "cuda" else 60


def timed(train, steps: int = STEPS):
    model.load_state_dict(start_state)  # both variants start from the same weights
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    losses = train(steps)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return losses, (time.perf_counter() - t0) * 1e3


# --8<-- [start:measure]
timed(train_bulk, 20)  # warm-up
item_losses, item_ms = timed(train_item)
bulk_losses, bulk_ms = timed(train_bulk)
print("device:", torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
print(f".item() every step: {item_ms:8.1f} ms for {STEPS} steps")
print(f"one transfer at end: {bulk_ms:8.1f} ms for {STEPS} steps")
print(f"per-step / at-end: {item_ms / bulk_ms:.2f}x")
print(
    "same losses:", torch.allclose(torch.tensor(item_losses), torch.tensor(bulk_losses))
)
# --8<-- [end:measure]
