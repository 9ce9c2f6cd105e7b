"""Saving a DataParallel model: the `module.` prefix, the error it causes, and two clean
fixes."""

import argparse
import io
import textwrap

import torch
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()


device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def make_model():
    return nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2)).to(device)


def roundtrip(state):  # torch.save / torch.load through memory instead of a file
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf)


# --8<-- [start:prefix]
torch.manual_seed(0)
# on a CPU-only machine too: the wrapper is still there
dp = nn.DataParallel(make_model())
print("keys of dp.state_dict():\n ", list(dp.state_dict()))
# --8<-- [end:prefix]

# --8<-- [start:error]
saved = roundtrip(dp.state_dict())
plain = make_model()
try:
    plain.load_state_dict(saved)
except RuntimeError as e:  # torch's message, its lines wrapped to 80 columns
    for i, line in enumerate(str(e).splitlines()):
        print(textwrap.fill(line.strip(), 80, initial_indent="  " * (i > 0),
                            subsequent_indent="    "))
# --8<-- [end:error]

# --8<-- [start:fix-save]
saved = roundtrip(dp.module.state_dict())  # fix 1: save the inner model
print("keys of dp.module.state_dict():", list(saved))
print("fix 1:", plain.load_state_dict(saved))
# --8<-- [end:fix-save]

# --8<-- [start:fix-load]
saved = roundtrip(dp.state_dict())  # a checkpoint that already has the prefix
consume_prefix_in_state_dict_if_present(saved, "module.")  # fix 2: strip it, in place
print("fix 2:", plain.load_state_dict(saved))
# --8<-- [end:fix-load]

# --8<-- [start:check]
x = torch.randn(4, 5, device=device)
assert torch.allclose(
    plain(x), dp(x), atol=1e-6
), "the plain model should compute what dp computes"
print("the plain model now computes what the DataParallel model computes")
# --8<-- [end:check]
