"""Start the processes from the script itself with torch.multiprocessing.spawn, no launcher."""

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


# --8<-- [start:worker]
def worker(rank: int, world_size: int, port: int) -> None:
    # mp.spawn passes the process index first; the environment is ours to set
    if torch.cuda.device_count() >= world_size:  # a GPU for every process
        torch.cuda.set_device(rank)  # one machine: rank == local rank
        device, backend = torch.device("cuda", rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=60))
    x = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(x)
    if rank == 0:
        print(f"{world_size} processes started by mp.spawn, all_reduce sum: {x.item()}")
    dist.destroy_process_group()
# --8<-- [end:worker]


# --8<-- [start:main]
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # port 0: the OS picks a free one
        return s.getsockname()[1]


if __name__ == "__main__":  # required: spawn re-imports this file in every child
    world_size = torch.cuda.device_count() if torch.cuda.device_count() >= 2 else 2
    mp.spawn(worker, args=(world_size, free_port()), nprocs=world_size, join=True)
    print("every process exited cleanly")
# --8<-- [end:main]
