"""Which devices exist here, and a device-picking helper that works with or without a
GPU."""

import argparse

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

# --8<-- [start:names]
cpu = torch.device("cpu")
gpu0 = torch.device("cuda:0")  # the same as torch.device("cuda", 0)
gpu = torch.device("cuda")  # no index: whichever GPU is current
print(cpu, gpu0, gpu)
print(repr(gpu0), "type:", gpu0.type, "index:", gpu0.index)
# --8<-- [end:names]

# --8<-- [start:count]
print("CUDA available:", torch.cuda.is_available())
print("GPU count:", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    print(f"  cuda:{i} is a {torch.cuda.get_device_name(i)}")
# the accelerator torch was built for, and the one this machine really has
# (both since torch 2.7; in 2.6 the function checked at run time and took no argument)
print("accelerator:", torch.accelerator.current_accelerator())
print("accelerator, checked:",
      torch.accelerator.current_accelerator(check_available=True))
# --8<-- [end:count]


# --8<-- [start:helpers]
def gpu_or_cpu(i: int = 0) -> torch.device:
    """GPU number i if it exists, otherwise the CPU."""
    if i < torch.cuda.device_count():
        return torch.device(f"cuda:{i}")
    return torch.device("cpu")


def all_gpus_or_cpu() -> list[torch.device]:
    """Every GPU, or [cpu] when there is none."""
    gpus = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    return gpus or [torch.device("cpu")]


print(gpu_or_cpu(), gpu_or_cpu(7), all_gpus_or_cpu())
# --8<-- [end:helpers]
