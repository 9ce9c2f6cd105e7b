"""DDP's buckets: how bucket_cap_mb (left out, or given) sets their number, and what
gradient_as_bucket_view=True saves (memory; copies, with zero_grad(set_to_none=False)),
each predicted and counted."""

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
from torch.profiler import ProfilerActivity, profile

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/ddp_buckets.py")
os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # no log line per profiler start/stop
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
failed = []


def report(what, predicted, counted, unit):
    show(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


def run(steps=3, set_to_none=True, **ddp_args):
    """A few steps of the model of ddp/cost.py; the buckets of the last one, and the
    gradient-shaped copies in its backward (the profiler sees DDP's own ops)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512),
                          nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              **ddp_args)
    buckets = []

    def hook(state, bucket):  # sees each bucket's flat buffer
        buckets.append(bucket.buffer())
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    shapes = {tuple(p.shape) for p in model.parameters()}
    for _ in range(steps):  # step 1 has one bucket; DDP rebuilds them after it
        buckets.clear()
        opt.zero_grad(set_to_none=set_to_none)
        loss = ddp(torch.randn(32, 256, device=device)).square().mean()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            loss.backward()
        opt.step()
    copies = sum(1 for e in prof.events()  # into a bucket (times 1/world), and back
                 if e.name in ("aten::mul", "aten::copy_") and e.input_shapes
                 and tuple(e.input_shapes[0]) in shapes)
    return model, buckets, ddp, copies


# --8<-- [start:cap]
def predicted_buckets(params, first_cap, cap):  # DDP's rule (ddp/cost.py): reverse
    sizes = [0]  # order, close a bucket at >= its cap; the first has a cap of its own
    for p in reversed(params):
        if sizes[-1] >= (first_cap if len(sizes) == 1 else cap):
            sizes.append(0)
        sizes[-1] += p.numel() * p.element_size()
    return len(sizes)


MiB = 1024 * 1024
FIRST = dist._DEFAULT_FIRST_BUCKET_BYTES  # 1 MiB
for args, first_cap, cap in [({}, FIRST, 25 * MiB), ({"bucket_cap_mb": 25}, 25 * MiB,
                             25 * MiB), ({"bucket_cap_mb": 1}, MiB, MiB),
                             ({"static_graph": True}, FIRST, 25 * MiB)]:
    model, buckets, ddp, _ = run(**args)
    report(f"DDP(model{''.join(f', {k}={v}' for k, v in args.items())}), buckets",
           predicted_buckets(list(model.parameters()), first_cap, cap), len(buckets),
           "buckets")
data = ddp._get_ddp_logging_data()  # what DDP logs about itself (a private method)
show(f"static_graph in DDP's logging data: {data.get('static_graph')}, "
     f"can_set_static_graph: {data.get('can_set_static_graph')}")
# --8<-- [end:cap]


# --8<-- [start:view]
def outside(model, buckets):
    """Bytes of gradient storage that is not a bucket's."""
    in_buckets = {b.untyped_storage().data_ptr() for b in buckets}
    return sum(p.grad.untyped_storage().nbytes() for p in model.parameters()
               if p.grad.untyped_storage().data_ptr() not in in_buckets)


P4 = sum(p.numel() * 4 for p in model.parameters())  # float32 gradients
n = len(list(model.parameters()))
# copies per backward: each new gradient into its bucket, then back unless .grad is
# the bucket's view; a gradient kept as a view (set_to_none=False) is divided in place
show("view: gradient_as_bucket_view; zeroed: zero_grad(set_to_none=False)")
for view, none, copies in [(False, True, 2 * n), (True, True, n), (True, False, 0)]:
    model, buckets, _, counted = run(set_to_none=none, gradient_as_bucket_view=view)
    tag = f"view {'on' if view else 'off'}" + ("" if none else ", zeroed")
    report(f"{tag}: bytes outside the buckets", 0 if view else P4,
           outside(model, buckets), "B")
    report(f"{tag}: copies per backward", copies, counted, "copies")
# --8<-- [end:view]

del model, buckets, ddp
gc.collect()
dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
