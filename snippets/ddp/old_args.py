"""The head of a script written for the old `python -m torch.distributed.launch`."""

# --8<-- [start:old]
import argparse

parser = argparse.ArgumentParser()
# the old launcher's underscore
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()
print("local rank", args.local_rank)
# --8<-- [end:old]
