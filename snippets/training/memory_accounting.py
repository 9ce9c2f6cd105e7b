"""Where training memory goes: parameters, gradients, optimizer state, activations."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
KiB = 1024


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# --8<-- [start:count]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512)).to(device)
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(64, 512, device=device)
n = sum(p.numel() for p in model.parameters())
by_hand = {  # float32: 4 bytes per number
    "parameters": 4 * n,
    "gradients": 4 * n,  # one per parameter, same shape
    "AdamW state": 2 * 4 * n,  # exp_avg and exp_avg_sq (+ a 0-d step each)
    "activations": 4 * 64 * (1024 + 512),  # ReLU output, last Linear's output
}

saved = {}  # what autograd keeps for backward, by storage (shared ones once)
params = {p.untyped_storage().data_ptr() for p in model.parameters()}
params.add(x.untyped_storage().data_ptr())  # the input is not an activation


def pack(t):
    ptr = t.untyped_storage().data_ptr()
    if ptr not in params:
        saved[ptr] = t.untyped_storage().nbytes()
    return t


with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    loss = model(x).square().mean()
measured = {"activations": sum(saved.values())}
loss.backward()
opt.step()
measured["parameters"] = nbytes(model.parameters())
measured["gradients"] = nbytes(p.grad for p in model.parameters())
measured["AdamW state"] = nbytes(
    t for s in opt.state.values() for k, t in s.items() if k != "step")
for name, b in by_hand.items():
    print(f"{name:12} by hand {b / KiB:6.0f} KiB"
          f"   tensors {measured[name] / KiB:6.0f} KiB")
    assert measured[name] == b, name
# --8<-- [end:count]

# --8<-- [start:cuda]
total = sum(by_hand.values()) - by_hand["activations"]  # activations freed by backward
if device == "cuda":  # the caching allocator's count of live tensors, in whole blocks
    torch.cuda.synchronize()
    live = torch.cuda.memory_allocated() - nbytes([x])
    print(f"after the step: by hand {total / KiB:.0f} KiB,\n "
          f" torch.cuda.memory_allocated {live / KiB:.0f} KiB"
          f" ({(live - total) / KiB:.0f} KiB more)")
else:
    print(f"after the step: by hand {total / KiB:.0f} KiB\n"
          "  (on a GPU, compared with torch.cuda.memory_allocated)")
# --8<-- [end:cuda]
