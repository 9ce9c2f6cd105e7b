"""A DCP checkpoint folder to one torch.save file and back (format_utils), in one
process.

Run: python snippets/production/dcp_convert.py /tmp/reshard   (a folder dcp.save wrote)
"""

import argparse
import os
import shutil
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import (dcp_to_torch_save,
                                                      torch_save_to_dcp)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("folder", help="a DCP checkpoint: what dcp_reshard.py --save wrote")
args = parser.parse_args()
# no_dist=True below says it; DCP warns that it loads in one process all the same
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
if not os.path.exists(os.path.join(args.folder, ".metadata")):
    parser.exit(1, f"{args.folder}: not a complete DCP checkpoint (no .metadata)\n")

# --8<-- [start:convert]
one_file = args.folder + ".pt"
dcp_to_torch_save(args.folder, one_file)  # every shard of every rank, joined
sd = torch.load(one_file, weights_only=True)  # plain tensors, nested as they were saved
print(f"dcp_to_torch_save: {os.path.basename(one_file)} holds\n  "
      f"{({k: tuple(v.shape) for k, v in sd['model'].items()})}")

again = args.folder + "-again"
shutil.rmtree(again, ignore_errors=True)
torch_save_to_dcp(one_file, again)  # unpickles the whole file: only files you trust
print(f"torch_save_to_dcp: {os.path.basename(again)}/ holds "
      f"{sorted(os.listdir(again))}")
back = {"model": {k: torch.empty_like(v) for k, v in sd["model"].items()}}
dcp.load(back, checkpoint_id=again, no_dist=True)  # no process group, one process
# --8<-- [end:convert]

ref = torch.load(args.folder + ".full.pt", weights_only=True) \
    if os.path.exists(args.folder + ".full.pt") else sd["model"]
equal = all(torch.equal(ref[k], sd["model"][k])
            and torch.equal(ref[k], back["model"][k]) for k in ref)
print(f"  both against the weights before saving: "
      f"torch.equal on all {len(ref)}: {equal}")
shutil.rmtree(again, ignore_errors=True)
os.remove(one_file)
if not equal:
    raise SystemExit("a conversion changed the weights")
