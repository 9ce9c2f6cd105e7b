"""torch.compile with DDP: DDPOptimizer splits the graph at bucket boundaries."""

import argparse
import gc
import logging
import os
import sys
import time
import warnings
from datetime import timedelta

import torch
import torch._dynamo
import torch._inductor.config
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

if "LOCAL_RANK" not in os.environ:
    print("run me with: torchrun --standalone --nproc-per-node=2 "
          "snippets/training/compile_ddp.py", file=sys.stderr)
    sys.exit(2)
parser = argparse.ArgumentParser()
parser.add_argument("--backend", default="aot_eager", help="aot_eager or inductor")
args = parser.parse_args()
torch._logging.set_logs(dynamo=logging.ERROR)  # no warnings with timestamps
# inductor warns that TF32 is off, PyTorch's default for float32 matmuls (we keep
# it), only when it compiles from scratch
warnings.filterwarnings("ignore", "TensorFloat32 tensor cores")
# it also keeps compiled graphs on disk: a second run's first step would hardly compile
torch._inductor.config.fx_graph_cache = False

local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])
gpus = torch.cuda.device_count()
if gpus:  # ranks share GPUs when there are fewer GPUs than ranks on this node
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)  # before any other CUDA work
    backend = "nccl" if gpus >= local_world else "gloo"  # NCCL: one GPU per rank
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend, timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 0:  # which case of the device rule ran
    print(f"{local_world} processes, {gpus} GPUs here: {backend} on {device.type}")


class MLP(nn.Module):  # Dynamo traces forward frames in user code
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


# --8<-- [start:count]
graphs = []  # the forward graphs Dynamo hands to the backend


def counting_backend(gm, example_inputs):
    graphs.append(gm)
    return torch._dynamo.lookup_backend(args.backend)(gm, example_inputs)
# --8<-- [end:count]


def run(optimize_ddp: bool) -> tuple[float, float]:
    # --8<-- [start:ddp]
    torch._dynamo.reset()
    torch._dynamo.config.optimize_ddp = optimize_ddp  # the default is True
    graphs.clear()
    torch.manual_seed(0)
    model = MLP(512, 3).to(device)  # 3 layers of 1 MiB (float32) + bias
    # 1 MiB buckets (DDP's first bucket is 1 MiB too): one layer per bucket
    ddp_model = DDP(model, bucket_cap_mb=1,
                    device_ids=[device.index] if device.type == "cuda" else None)
    compiled = torch.compile(ddp_model, backend=counting_backend)
    # --8<-- [end:ddp]
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    x = torch.randn(8, 512, device=device)
    times = []
    for _ in range(6):
        t = time.perf_counter()
        compiled(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    del ddp_model, opt
    gc.collect()
    return times[0], sorted(times[1:])[len(times[1:]) // 2]


for optimize_ddp in (False, True):
    first, steady = run(optimize_ddp)
    if rank == 0:
        print(f"optimize_ddp={optimize_ddp!s:5}: {len(graphs)} graph(s) compiled;"
              f" first step {first * 1e3:.0f} ms, then {steady * 1e3:.2f} ms"
              f" ({first / steady:.0f}x)")
gc.collect()
dist.destroy_process_group()
