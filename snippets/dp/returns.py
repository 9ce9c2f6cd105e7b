"""What DataParallel does with what forward returns: gather() rebuilds it, leaf by leaf.
"""

import argparse

import torch
from torch import nn
from torch.nn.parallel import gather

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

n_gpus = torch.cuda.device_count()


# --8<-- [start:module]
class Returns(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.fc, self.kind = nn.Linear(5, 2), kind

    def forward(self, x):
        y = self.fc(x)
        return {
            "tensor": lambda: y,
            "tuple": lambda: (y, y.sum(dim=1)),
            "nested dict": lambda: {"logits": y, "aux": {"norm": y.norm(dim=1)}},
            "0-dim loss": lambda: y.pow(2).mean(),
            "None": lambda: None,
            "int": lambda: x.shape[0],
            "str": lambda: "ok",
            "dict with a str": lambda: {"tag": "ok", "logits": y},
        }[self.kind]()
# --8<-- [end:module]


def show(obj):
    if isinstance(obj, torch.Tensor):
        return f"tensor{list(obj.shape)} on {obj.device}"
    if isinstance(obj, tuple):
        return "(" + ", ".join(show(o) for o in obj) + ")"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k!r}: {show(v)}" for k, v in obj.items()) + "}"
    return repr(obj)


def attempt(kind, fn):
    try:
        line = f"{kind:>15} -> {show(fn())}"
    except Exception as e:  # noqa: BLE001 - showing what each kind raises is the point
        line = f"{kind:>15} -> {type(e).__name__}:\n{'':19}{str(e).splitlines()[0]}"
    if len(line) > 80 and "\n" not in line:  # a long dict: break after an entry
        cut = line.rfind(", '", 0, 80) + 1
        line = f"{line[:cut]}\n{'':19}{line[cut + 1:]}"
    print(line)


KINDS = [
    "tensor",
    "tuple",
    "nested dict",
    "0-dim loss",
    "None",
    "int",
    "str",
    "dict with a str",
]
x = torch.randn(30, 5)

# --8<-- [start:real-dp]
if n_gpus >= 2:
    print(f"nn.DataParallel on {n_gpus} GPUs, batch 30:")
    for kind in KINDS:
        dp = nn.DataParallel(Returns(kind).cuda())
        attempt(kind, lambda: dp(x))
# --8<-- [end:real-dp]

# --8<-- [start:cpu]
else:
    print(f"{n_gpus} GPU(s): nn.DataParallel calls the module as it is:")
    for kind in KINDS:
        attempt(kind, lambda: nn.DataParallel(Returns(kind))(x))
    print("the real gather() on what 2 replicas would return (CPU tensors here):")
    for kind in KINDS:
        net = Returns(kind)
        attempt(kind, lambda: gather([net(chunk) for chunk in x.chunk(2)], 0))
# --8<-- [end:cpu]
