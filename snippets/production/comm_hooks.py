"""DDP communication hooks that cast gradients to 16 bits: fp16_compress_hook and
bf16_compress_hook. The bytes each hands to dist.all_reduce, predicted and counted, and
the error of the gradient it delivers, against DDP's exact average."""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/comm_hooks.py")
local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
if gpus:
    torch.cuda.set_device(device)
# The device rule (hello.py): NCCL only if no two processes got the same GPU, by UUID
timeout = timedelta(seconds=60)
store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
uuid = str(torch.cuda.get_device_properties(device).uuid) if gpus else "cpu"
store.set(f"device/{rank}", uuid)
devices = set(store.multi_get([f"device/{r}" for r in range(world_size)]))
own = b"cpu" not in devices and len(devices) == world_size
backend = "nccl" if own else "gloo"
dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                        timeout=timeout)
show = print if rank == 0 else (lambda *a: None)
show(f"{world_size} processes on "
     f"{'the CPU' if b'cpu' in devices else f'{len(devices)} GPU(s)'}: {backend}")

# --8<-- [start:count]
sent, all_reduce = [0], dist.all_reduce  # bytes handed to all_reduce in this step


def counted_all_reduce(tensor, *args, **kwargs):  # the hooks call dist.all_reduce
    sent[0] += tensor.numel() * tensor.element_size()
    return all_reduce(tensor, *args, **kwargs)


dist.all_reduce = counted_all_reduce
# --8<-- [end:count]



# --8<-- [start:hooks]
def bf16_hook(state, bucket):  # the same hook under another name: see below
    return default_hooks.bf16_compress_hook(state, bucket)


HOOKS = {"allreduce_hook (no compression)": default_hooks.allreduce_hook,
         "fp16_compress_hook": default_hooks.fp16_compress_hook,
         "bf16_compress_hook": bf16_hook}
BOUNDS = {"allreduce_hook (no compression)": ("==", 0, "the exact average"),
          "fp16_compress_hook": ("<", 1e-3, "float16 round-off, 11 significant bits"),
          "bf16_compress_hook": ("<", 1e-2, "bfloat16 round-off, 8 significant bits")}
# --8<-- [end:hooks]
torch.manual_seed(0)
teacher = nn.Linear(256, 10).to(device)  # targets a model can learn


def step(hook):
    """Two steps without an optimizer step (the same weights for every hook): the
    gradients of step 2, when DDP has rebuilt its buckets, and the bytes it sent."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512),
                          nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    ddp.register_comm_hook(None, hook)  # None: the default process group
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        x = torch.randn(32 * world_size, 256, generator=gen).to(device)
        y = teacher(x).detach()
        sent[0] = 0
        ddp.zero_grad()
        mine = slice(rank * 32, (rank + 1) * 32)
        nn.functional.mse_loss(ddp(x[mine]), y[mine]).backward()
    params = list(model.parameters())
    return [p.grad.clone() for p in params], sent[0], sum(p.numel() for p in params)


# --8<-- [start:report]
failed, exact = [], None
show("bytes each hook passes to dist.all_reduce per step:")
for name, hook in HOOKS.items():
    grads, nbytes, P = step(hook)  # P: the model's parameters, 662,026
    exact = exact or grads  # the first hook: DDP's own average
    predicted = P * (2 if "16" in name else 4)  # 16 bits: 2 bytes; float32: 4
    show(f"{name}: predicted {predicted:,} B, "
         f"counted {nbytes:,} B")
    err = (sum(((g - e) ** 2).sum() for g, e in zip(grads, exact)).sqrt()
           / sum((e ** 2).sum() for e in exact).sqrt()).item()
    op, bound, why = BOUNDS[name]
    ok = err == bound if op == "==" else err < bound
    verdict = f"{op} {bound:g}: {why}" if ok else f"{'!=' if op == '==' else '>='} " \
        f"{bound:g}: more than {why}"
    show(f"  {name.split('_')[0]} error of the averaged gradient: {err:.2g}\n"
         f"    ({verdict})")
    failed += [] if ok and predicted == nbytes else [name]
# --8<-- [end:report]

gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted or a bound not met: {', '.join(failed)}")
