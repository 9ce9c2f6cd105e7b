"""Which rank is stuck, and where? monitored_barrier names it; faulthandler, the line.

Run with: python snippets/ddp/forensics.py
"""

import argparse
import faulthandler
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta

import torch.distributed as dist
import torch.multiprocessing as mp


def where(dump: str) -> list[str]:
    """This file's frames in a faulthandler dump, with a path the same anywhere."""
    here = os.path.abspath(__file__)
    return [line.replace(here, os.path.relpath(here)).strip()
            for line in dump.splitlines() if here in line]


# --8<-- [start:worker]
def worker(rank: int, world_size: int, port: int, reports, done) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=30))
    with tempfile.TemporaryFile("w+") as dump:
        # if this rank is still here in 1 s, write every thread's stack to `dump`
        faulthandler.dump_traceback_later(1, file=dump)
        if rank == 1:
            time.sleep(3)  # the straggler: stuck elsewhere (a slow data loader, say)
        try:  # gloo only: rank 0 waits for every rank and names those that never came
            dist.monitored_barrier(timeout=timedelta(seconds=2), wait_all_ranks=True)
        except RuntimeError as e:
            if rank == 0:
                reports.put(("monitored_barrier on rank 0", str(e).splitlines()[0]))
        faulthandler.cancel_dump_traceback_later()
        dump.seek(0)
        reports.put((f"faulthandler on rank {rank}", where(dump.read())))
    done.wait()  # leave together
    dist.destroy_process_group()
# --8<-- [end:worker]


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"  # the C++ log repeats the error
    ctx = mp.get_context("spawn")
    reports, done = ctx.SimpleQueue(), ctx.Barrier(2)
    mp.spawn(worker, args=(2, port, reports, done), nprocs=2, join=True)
    for label, text in sorted(reports.get() for _ in range(3)):
        print(f"{label}:")
        for line in text if isinstance(text, list) else [text]:
            print("  " + line)
    sys.exit(0)
