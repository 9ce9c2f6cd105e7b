"""The classic hang: one rank runs a collective the other never runs.

A short timeout turns it into an error. Run with: python snippets/ddp/hang.py
"""

import argparse
import os
import re
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


# --8<-- [start:bug]
def worker(rank: int, world_size: int, port: int, errors, done) -> None:
    # a short timeout, not 30 minutes; rank 1's is shorter, so it always gives up first
    timeout = timedelta(seconds=3 if rank == 1 else 6)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timeout)
    loss = torch.tensor([1.0])
    t0 = time.perf_counter()
    try:
        if rank == 0:  # the bug: a metric that only rank 0 all-reduces
            dist.all_reduce(torch.tensor([0.5, 0.5]))
        dist.all_reduce(loss)  # every rank
        print(f"rank {rank}: no error")
    except RuntimeError as e:
        seconds = time.perf_counter() - t0
        message = re.sub(r"\]:\d+", "]:<port>", str(e))  # the port differs in every run
        errors.put(f"rank {rank} gave up after {seconds:.1f} s:\n"
                   f"  RuntimeError: {message}")
    done.wait()  # leave together: a rank that exits early closes its peer's connection
    dist.destroy_process_group()
# --8<-- [end:bug]


# --8<-- [start:main]
if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(
        "TORCH_DISTRIBUTED_DEBUG =",
        os.environ.get("TORCH_DISTRIBUTED_DEBUG", "(not set)"),
    )
    ctx = mp.get_context("spawn")
    errors, done = ctx.SimpleQueue(), ctx.Barrier(2)
    mp.spawn(worker, args=(2, port, errors, done), nprocs=2, join=True)
    reports = sorted(errors.get() for _ in range(2) if not errors.empty())
    print("\n".join(reports) or "no errors")
    sys.exit(1 if reports else 0)
# --8<-- [end:main]
