"""CUDA_VISIBLE_DEVICES is read once, when CUDA initialises: setting it later changes
nothing."""

import argparse
import os
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("this example needs a GPU: with none, there is nothing to hide")

# --8<-- [start:late]
print("GPUs before:", torch.cuda.device_count())
torch.zeros(1, device="cuda")  # CUDA is initialised here
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # too late: hide every GPU?
print("GPUs after setting CUDA_VISIBLE_DEVICES='':", torch.cuda.device_count())
print("a new tensor still goes to", torch.zeros(1, device="cuda").device)
# --8<-- [end:late]
