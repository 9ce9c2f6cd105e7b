"""The classic hang: one rank runs a collective the other never runs.

A short timeout turns it into an error. Run with: python snippets/ddp/hang.py
(--same-size: the stray metric has the loss's size, and the two calls pair up silently)
"""

import argparse
import os
import re
import socket
import sys
import textwrap
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


# --8<-- [start:bug]
def worker(rank: int, world_size: int, port: int, errors, done, size: int) -> None:
    # every rank first waits up to 60 s for all to start: a late start is not the hang
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=rank == 0,
                          timeout=timedelta(seconds=60))
    # then a short timeout, not 30 minutes; rank 1's is shorter, so it gives up first
    timeout = timedelta(seconds=3 if rank == 1 else 6)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=timeout)
    loss = torch.tensor([1.0])
    t0 = time.perf_counter()
    try:
        if rank == 0:  # the bug: a metric that only rank 0 all-reduces
            dist.all_reduce(torch.full((size,), 0.5))
        dist.all_reduce(loss)  # every rank
        print(f"rank {rank}: no error, loss all-reduced to {loss.item()} "
              f"({float(world_size)} expected)")
    except RuntimeError as e:
        seconds = time.perf_counter() - t0
        message = re.sub(r"\]:\d+", "]:<port>", str(e))  # the port differs in every run
        message = re.sub(r"^\[[^\]]*\.cc:\d+\] ", "", message)  # gloo's C++ source line
        errors.put(f"rank {rank} gave up after {seconds:.1f} s:\n" + textwrap.fill(
            f"RuntimeError: {message}", 80, initial_indent="  ",
            subsequent_indent="    ",
            break_long_words=False, break_on_hyphens=False))
    done.wait()  # leave together: a rank that exits early closes its peer's connection
    dist.destroy_process_group()
# --8<-- [end:bug]


# --8<-- [start:main]
if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--same-size", action="store_true",
                        help="give the stray metric the loss's size (1 element)")
    size = 1 if parser.parse_args().same_size else 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(
        "TORCH_DISTRIBUTED_DEBUG =",
        os.environ.get("TORCH_DISTRIBUTED_DEBUG", "(not set)"),
    )
    ctx = mp.get_context("spawn")
    errors, done = ctx.SimpleQueue(), ctx.Barrier(2)
    mp.spawn(worker, args=(2, port, errors, done, size), nprocs=2, join=True)
    reports = sorted(errors.get() for _ in range(2) if not errors.empty())
    print("\n".join(reports) or "no errors")
    sys.exit(1 if reports else 0)
# --8<-- [end:main]
