"""A state dict saved from a wrapped model has every key prefixed with "module."."""

import argparse
import io

import torch
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

torch.manual_seed(0)

# --8<-- [start:save]
model = nn.Linear(4, 2)
# DistributedDataParallel prefixes the keys the same way
wrapped = nn.DataParallel(model)
buffer = io.BytesIO()  # stands for a checkpoint file
torch.save(wrapped.state_dict(), buffer)
print("saved keys:", list(wrapped.state_dict()))
# --8<-- [end:save]

# --8<-- [start:load]
buffer.seek(0)
state = torch.load(buffer)
fresh = nn.Linear(4, 2)
try:
    fresh.load_state_dict(state)
except RuntimeError as e:
    print("RuntimeError:", e)
# --8<-- [end:load]

# --8<-- [start:fix]
consume_prefix_in_state_dict_if_present(state, "module.")  # strips it in place
fresh.load_state_dict(state)
print("loaded keys:", list(state), "| same weights:",
      # DataParallel moved model to the GPU
      torch.equal(fresh.weight, model.weight.cpu()))
# better: save the inner model in the first place
print("wrapped.module keys:", list(wrapped.module.state_dict()))
# --8<-- [end:fix]
