"""Two jobs on one machine: the second torchrun cannot listen on the first one's port.

Run with: python snippets/troubleshooting/port_in_use.py
(it calls torchrun's own entry point, torch.distributed.run.main, with the arguments you
would type after `torchrun`, and the workers it starts are this file with --worker)
"""

import argparse
import os
import sys
import textwrap
from datetime import timedelta

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--worker", action="store_true", help="what torchrun starts")
if parser.parse_args().worker:  # a worker: its job's rendezvous worked; say so, leave
    print(f"  worker rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} started")
    sys.exit(0)

import torch.distributed as dist  # noqa: E402
from torch.distributed.run import main as torchrun  # noqa: E402

WORKER = [__file__, "--worker"]

# --8<-- [start:first]
# job 1: its rendezvous store listens on a port (port 0: the OS picks a free one, so
# this demo never collides with a real job on 29500, torchrun's default)
job1 = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=10))
port = job1.port
# --8<-- [end:first]

# --8<-- [start:second]
# job 2, on the same port: torchrun --nproc-per-node=1 --master-port=PORT train.py
try:
    torchrun(["--nproc-per-node=1", f"--master-port={port}", *WORKER])
except dist.DistNetworkError as e:
    message = str(e).replace(str(port), "PORT")  # the port changes from run to run
    print(textwrap.fill(f"--master-port=PORT: DistNetworkError: {message}", 80,
                        subsequent_indent="  "))
# --8<-- [end:second]

# --8<-- [start:fix]
for args in (["--standalone"], ["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0"]):
    print(" ".join(args) + ":")
    torchrun([*args, "--nproc-per-node=1", *WORKER])  # a free port of their own
# --8<-- [end:fix]
del job1
