"""What a DDP step costs: bytes all-reduced, buckets, memory and FLOPs, each
predicted by a formula and counted in the run."""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.flop_counter import FlopCounterMode

# --8<-- [start:setup]
argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: "
             "torchrun --standalone --nproc-per-node=2 snippets/ddp/cost.py")

local_rank = int(os.environ["LOCAL_RANK"])
gpus = torch.cuda.device_count()  # the GPUs this process can see
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)  # before any other CUDA work
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world_size)]))
own = b"cpu" not in devices and len(devices) == world_size  # a GPU of its own each
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                        timeout=timeout)
if rank == 0:  # which case of the device rule ran
    where = "the CPU" if b"cpu" in devices else f"{len(devices)} GPU(s)"
    print(f"{world_size} processes on {where}: {backend}")
# --8<-- [end:setup]

# --8<-- [start:model]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
CAP_MB, BATCH = 1, 32  # bucket_cap_mb (MiB), samples per rank per step
ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
          bucket_cap_mb=CAP_MB)
params = list(model.parameters())
P = sum(p.numel() for p in params)  # parameters, float32: 4 bytes each
weights = [m.weight.numel() for m in model if isinstance(m, nn.Linear)]
buckets = []  # bytes of each bucket all-reduced in the current step


def counting_hook(state, bucket):  # DDP calls it once per bucket, when it is full
    buckets.append(bucket.buffer().numel() * bucket.buffer().element_size())
    return allreduce_hook(state, bucket)  # DDP's own all-reduce: training unchanged


ddp.register_comm_hook(None, counting_hook)  # None: the default process group
# --8<-- [end:model]

# --8<-- [start:predict]
# The rule DDP rebuilds its buckets by after step 1: walk the parameters in the order
# their gradients arrive (the reverse of the forward), close a bucket at >= cap bytes.
cap, sizes = CAP_MB * 1024 * 1024, [0]
for p in reversed(params):
    if sizes[-1] >= cap:
        sizes.append(0)
    sizes[-1] += p.numel() * 4
failed = []


def report(what, predicted, counted, unit):
    if rank == 0:
        print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)
# --8<-- [end:predict]


# --8<-- [start:steps]
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
for step in (1, 2):
    x = torch.randn(BATCH, 256, device=device)
    y = torch.randn(BATCH, 10, device=device)
    buckets.clear()
    opt.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as flops:  # counts matmul FLOPs, this rank
        nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    report(f"step {step}, gradient bytes all-reduced", P * 4, sum(buckets), "B")
    k = 1 if step == 1 else len(sizes)  # step 1: one bucket, in no known order yet
    report(f"step {step}, buckets", k, len(buckets), "buckets")
# forward 2 FLOPs per weight and sample; backward 4, less the 2 for the input's gradient
# in the first layer, which nothing needs
report("FLOPs per step and rank", (6 * sum(weights) - 2 * weights[0]) * BATCH,
       flops.get_total_flops(), "FLOP")
n = world_size
if rank == 0:
    print(f"ring all-reduce, bytes sent per rank: 2(n-1)/n * P*4 = "
          f"{2 * (n - 1) * P * 4 / n:,.0f} B\n"
          "  (formula only: gloo picks its algorithm)")
# --8<-- [end:steps]

# --8<-- [start:memory]
def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


report("parameters per rank", P * 4, nbytes(params), "B")
report("gradients per rank", P * 4, nbytes(p.grad for p in params), "B")
adam = torch.optim.Adam(ddp.parameters(), lr=1e-3)
adam.step()  # one step on the gradients we have: Adam creates its state now
state = list(adam.state.values())
report("Adam moments per rank", 2 * P * 4,
       nbytes(s[k] for s in state for k in ("exp_avg", "exp_avg_sq")), "B")
report("Adam step counters per rank (a float32 per tensor)", len(params) * 4,
       nbytes(s["step"] for s in state), "B")
# --8<-- [end:memory]

# --8<-- [start:cleanup]
del ddp, opt, adam
gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
# --8<-- [end:cleanup]
