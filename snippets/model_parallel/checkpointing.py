"""Activation checkpointing: fewer saved activations, one more forward per block, same
gradients."""

import argparse
import copy

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

# --8<-- [start:model]
class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up, self.act, self.down = (
            nn.Linear(width, 4 * width),
            nn.GELU(),
            nn.Linear(4 * width, width),
        )
        self.calls = 0  # how many times forward ran

    def forward(self, h):
        self.calls += 1
        return self.down(self.act(self.up(h)))


class Net(nn.Module):
    def __init__(self, ckpt: bool, blocks: int = 4, width: int = 256):
        super().__init__()
        self.ckpt = ckpt
        self.blocks = nn.ModuleList(Block(width) for _ in range(blocks))

    def forward(self, h):
        for block in self.blocks:
            # keep only the block's input; recompute the inside during backward
            if self.ckpt:
                h = checkpoint(block, h, use_reentrant=False)
            else:
                h = block(h)
        return h
# --8<-- [end:model]


# --8<-- [start:count]
def saved_activations(model, x):
    """Run forward; count the tensors autograd saves for backward (not parameters)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            # a tensor saved twice is counted once
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    return out, len(seen), sum(seen.values())


torch.manual_seed(0)
plain = Net(ckpt=False).to(device)
ckpt = copy.deepcopy(plain)
ckpt.ckpt = True
x = torch.randn(512, 256, device=device, requires_grad=True)

for name, model in (("without checkpointing", plain), ("with checkpointing   ", ckpt)):
    out, n, nbytes = saved_activations(model, x)
    out.square().mean().backward()
    print(f"{name}: {n:2d} activations saved, {nbytes / 2**20:5.2f} MiB;\n"
          f"  each block's forward ran {model.blocks[0].calls} time(s)")
# --8<-- [end:count]

# --8<-- [start:check]
diff = max(
    (a.grad - b.grad).abs().max().item()
    for a, b in zip(plain.parameters(), ckpt.parameters())
)
# the recomputation runs the same kernels on the same inputs: the same bits
verdict = "== 0: bit-identical" if diff == 0 else "!= 0: the gradients differ"
print(f"max abs diff of the gradients: {diff:.1e} ({verdict})")
assert diff == 0, "checkpointing changed the gradients"
# --8<-- [end:check]
