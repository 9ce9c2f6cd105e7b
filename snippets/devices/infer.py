"""Run a small model on the device named on the command line: cpu, cuda or cuda:N."""

import argparse

import torch
from torch import nn


# --8<-- [start:parse]
def existing_device(name: str) -> torch.device:
    """torch.device(name) if that device is here, else an error that lists what is."""
    present = ["cpu"] + [f"cuda:{i} ({torch.cuda.get_device_name(i)})"
                         for i in range(torch.cuda.device_count())]
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise argparse.ArgumentTypeError(
            f"{e};\n  devices present: {', '.join(present)}")
    if device.type == "cuda":
        # a fresh process starts on 0
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():  # also catches "no GPU at all"
            raise argparse.ArgumentTypeError(
                f"{name} does not exist here;\n  devices present: {', '.join(present)}")
    elif device.type != "cpu":
        raise argparse.ArgumentTypeError(
            f"this script runs on cpu or cuda, not {device.type}"
        )
    return device
# --8<-- [end:parse]


# --8<-- [start:main]
parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--device", type=existing_device,
                    default="cuda:0" if torch.cuda.is_available() else "cpu")
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Linear(4, 2).to(args.device).eval()
batch = torch.randn(3, 4)  # data arrives in host memory
with torch.inference_mode():
    out = model(batch.to(args.device))
print(f"ran on {out.device}, output shape {tuple(out.shape)}")
# --8<-- [end:main]
