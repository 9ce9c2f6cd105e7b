"""DataParallel and its building blocks on a machine without a GPU (or with CPU
tensors)."""

import argparse

import torch
from torch import nn
from torch.nn.parallel import gather, parallel_apply, replicate, scatter

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

print("GPUs visible:", torch.cuda.device_count())

# --8<-- [start:wrapper]
torch.manual_seed(0)
model = nn.Linear(5, 2)
x = torch.randn(30, 5)
if torch.cuda.is_available():
    print("this machine has a GPU: DataParallel uses it (see the other sections)")
else:
    dp = nn.DataParallel(model, device_ids=[0, 1])  # GPUs that do not exist: no error
    print("device_ids:", dp.device_ids, "| dp.module is model:", dp.module is model)
    print("dp(x) equals model(x):", torch.equal(dp(x), model(x)))
# --8<-- [end:wrapper]

# --8<-- [start:blocks]
calls = {
    "scatter(x, [0, 1])": lambda: scatter(x, [0, 1]),
    "gather([a, b], 0)": lambda: gather(list(x.chunk(2)), 0),
    "replicate(model, [0, 1])": lambda: replicate(model, [0, 1]),
    "parallel_apply([model] * 2, ...)": lambda: parallel_apply(
        [model] * 2, list(x.chunk(2))
    ),
}
for name, call in calls.items():
    try:
        result = call()
        print(f"{name}: returned {type(result).__name__}")
    except Exception as e:  # noqa: BLE001 - what each one raises is the point
        print(f"{name}:\n  {type(e).__name__}: {str(e).strip().splitlines()[0]}")
# --8<-- [end:blocks]
