"""Start the processes from the script itself with torch.multiprocessing.spawn, no
launcher."""

import argparse
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


# --8<-- [start:worker]
def worker(rank: int, world_size: int, port: int) -> None:
    # mp.spawn passes the process index first; one machine, so rank == local rank
    gpus = torch.cuda.device_count()
    if gpus:  # the device rule: share the GPUs when there are fewer than processes
        device = torch.device("cuda", rank % gpus)
        torch.cuda.set_device(device)
        backend = "nccl" if gpus >= world_size else "gloo"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=60))
    x = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(x)
    if rank == 0:
        print(f"{world_size} processes, {gpus} GPUs here: {backend} on {device.type}")
        print(f"{world_size} processes started by mp.spawn, all_reduce sum: {x.item()}")
    dist.destroy_process_group()
# --8<-- [end:worker]


# --8<-- [start:main]
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # port 0: the OS picks a free one
        return s.getsockname()[1]


if __name__ == "__main__":  # required: spawn re-imports this file in every child
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nprocs", type=int, default=2, help="how many processes")
    world_size = parser.parse_args().nprocs
    mp.spawn(worker, args=(world_size, free_port()), nprocs=world_size, join=True)
    print("every process exited cleanly")
# --8<-- [end:main]
