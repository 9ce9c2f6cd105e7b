"""What each launcher passes to your script, and how argparse code written for the old
one fails.

torch's own launcher code builds the worker command line here, in one process: nothing
is guessed.
"""

import argparse
import os

# the launchers' config code warns when it is unset
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch.distributed.launch as launch  # noqa: E402
import torch.distributed.run as run  # noqa: E402

# --8<-- [start:argv]
# the worker command line each launcher builds (torch.distributed.run.config_from_args)
for name, parse in [("python -m torch.distributed.launch", launch.parse_args),
                    ("torchrun", run.parse_args)]:
    _, _, argv = run.config_from_args(
        parse(["--nproc-per-node=2", "train.py", "--lr=0.1"])
    )
    print(f"{name} runs:\n  python {' '.join(argv)}")
# --8<-- [end:argv]


class Parser(argparse.ArgumentParser):
    # raise instead of printing usage and exiting with status 2
    def error(self, message):
        raise ValueError(f"{self.prog}: error: {message}")


def try_parse(label, parser, argv):
    try:
        print(f"  {label}: {parser.parse_args(argv)}")
    except ValueError as e:
        print(f"  {label}: {e}")


# --8<-- [start:old]
old = Parser(prog="train.py")  # written for torch.distributed.launch before PyTorch 2.0
old.add_argument("--local_rank", type=int, default=0)
old.add_argument("--lr", type=float)

strict = Parser(prog="train.py")  # the same, but insisting on the argument
strict.add_argument("--local_rank", type=int, required=True)
strict.add_argument("--lr", type=float)
# --8<-- [end:old]

print("rank 1 started by python -m torch.distributed.launch (PyTorch >= 2.0):")
try_parse("old   ", old, ["--local-rank=1", "--lr=0.1"])
print("rank 1 started by torchrun (LOCAL_RANK=1 is in its environment):")
try_parse("old   ", old, ["--lr=0.1"])
try_parse("strict", strict, ["--lr=0.1"])

# --8<-- [start:fix]
parser = Parser(prog="train.py")
parser.add_argument("--lr", type=float)
args = parser.parse_args(["--lr=0.1"])
# torchrun sets this for each worker; set here for the demo
os.environ["LOCAL_RANK"] = "1"
local_rank = int(os.environ["LOCAL_RANK"])
print(f"fixed: {args}, local_rank={local_rank} (from the environment)")
# --8<-- [end:fix]
