"""Profile a DDP step (data, forward, backward, optimizer) with torch.profiler: the
all-reduce overlapping the backward (3 buckets), and not (1 bucket; no_sync and an
all-reduce by hand). Each step's trace is written as a Chrome trace, and read back:
what ran when, per rank."""

import argparse
import contextlib
import json
import os
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

CASES = {"overlap": 1, "one-bucket": 100, "by-hand": None}  # case: bucket_cap_mb
RANGES = ["data", "forward", "backward", "all-reduce by hand", "optimizer"]
parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--trace-dir", help="where to write the traces "
                    "(default: traces/ in the temporary folder, e.g. /tmp/traces)",
                    default=os.path.join(tempfile.gettempdir(), "traces"))
parser.add_argument("--case", choices=list(CASES), action="append",
                    help="only this case (repeat for more); default: all three")
args = parser.parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/production/profile_step.py")
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

# --8<-- [start:step]
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(512, 256), torch.randn(512, 10))
loader = torch.utils.data.DataLoader(data, batch_size=32)


def step(ddp, opt, batches, by_hand):
    with record_function("data"):
        x, y = (t.to(device) for t in next(batches))
    with ddp.no_sync() if by_hand else contextlib.nullcontext():
        with record_function("forward"):
            loss = nn.functional.mse_loss(ddp(x), y)
        with record_function("backward"):
            loss.backward()  # DDP all-reduces each bucket as soon as it is full
    if by_hand:  # what DDP does, done late: every gradient after the whole backward
        with record_function("all-reduce by hand"):
            for p in ddp.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world_size
    with record_function("optimizer"):
        opt.step()
        opt.zero_grad()
# --8<-- [end:step]


# --8<-- [start:profile]
def profile_case(cap_mb, path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512),
                          nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=cap_mb or 25)
    opt, batches = torch.optim.SGD(ddp.parameters(), lr=0.01), iter(loader)
    activities = [ProfilerActivity.CPU] + (  # and on a GPU its kernels, on streams
        [ProfilerActivity.CUDA] if device.type == "cuda" else [])
    # steps 1-2 unprofiled (DDP rebuilds its buckets after step 1), 3 warms the
    # profiler up, 4 is recorded and written to `path` when it ends
    with profile(activities=activities, schedule=schedule(wait=2, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(4):
            step(ddp, opt, batches, by_hand=cap_mb is None)
            prof.step()
    return prof, list(model.parameters())
# --8<-- [end:profile]


# --8<-- [start:read]
def read_trace(path):
    """From the trace's own events: the all-reduces launched, and those launched before
    the last gradient (the order of calls on one thread, not how long anything took);
    and what ran when: (name, start, end) in ms from the step's start, of the ranges,
    the last gradient and each all-reduce itself (on a thread of gloo's), in order."""
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    launches = [e for e in events if e["name"] == "c10d::allreduce_"]
    grads = [e for e in events if e["name"] == "AddmmBackward0"]  # one per Linear
    last = max(grads, key=lambda e: e["ts"])
    early = [e for e in launches if e["tid"] == last["tid"] and e["ts"] < last["ts"]]
    cpu = [e for e in events if e.get("cat") != "gpu_user_annotation"]  # GPU: twins
    t0 = next(e for e in cpu if e["name"].startswith("ProfilerStep"))["ts"]
    comm = sorted((e for e in cpu if e["name"] == f"{backend}:all_reduce"),
                  key=lambda e: e["ts"])
    rows = [(n, e) for n in RANGES for e in cpu if e["name"] == n] + [
        ("last gradient (AddmmBackward0)", last)] + [
        (f"{backend}:all_reduce {i}", e) for i, e in enumerate(comm, 1)]
    return events, len(launches), len(early), [
        (n, (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3) for n, e in rows]
# --8<-- [end:read]


def buckets(params, cap_mb):  # DDP's rule (ddp/cost.py): reverse order, close at >= cap
    sizes = [0]
    for p in reversed(params):
        sizes += [0] if sizes[-1] >= cap_mb * 1024 * 1024 else []
        sizes[-1] += p.numel() * p.element_size()
    return len(sizes)


failed = []
os.makedirs(args.trace_dir, exist_ok=True)
show("traces: --trace-dir/CASE-rankN.json, one per case and rank")
for case in args.case or CASES:
    cap_mb = CASES[case]
    path = os.path.join(args.trace_dir, f"{case}-rank{rank}.json")
    prof, params = profile_case(cap_mb, path)
    # --8<-- [start:table]
    host = torch.autograd.DeviceType.CPU  # with CUDA, a range also has a GPU twin
    totals = {e.key: e for e in prof.key_averages() if e.device_type == host}
    how = f"bucket_cap_mb={cap_mb}" if cap_mb else "no_sync, then dist.all_reduce"
    show(f"\n{case} ({how}), rank 0, step 4:\n  {'range or op':<20} calls   CPU total")
    for name in RANGES + ["c10d::allreduce_", f"{backend}:all_reduce"]:
        if name in totals:
            e = totals[name]
            show(f"  {name:<20} {e.count:>5} {e.cpu_time_total / 1e3:8.3f} ms")
    # --8<-- [end:table]
    events, launched, early, rows = read_trace(path)
    k = buckets(params, cap_mb) if cap_mb else len(params)  # by hand: one per tensor
    for what, p, c in [("all-reduces launched", k, launched), (
            "before the last gradient", k - 1 if cap_mb else 0, early)]:  # launched
        show(f"{case}, {what}: predicted {p:,} calls, counted {c:,} calls")
        failed += [f"{case}: {what}"] if p != c else []
    # --8<-- [start:timeline]
    every = [None] * world_size  # every rank's rows, printed by rank 0, side by side
    dist.all_gather_object(every, rows)
    failed += [f"{case}: timeline"] if len(rows) != 5 + (cap_mb is None) + k or any(
        [n for n, *_ in r] != [n for n, *_ in rows] for r in every) else []
    show(f"{case}, step 4, start .. end in ms from its start:\n{'':34}"
         + "".join(f"{f'rank {r}':>22}" for r in range(world_size)))
    for i, (name, *_) in enumerate(rows):
        show(f"  {name:<32}" + "".join(f"{r[i][1]:7.1f} ms ..{r[i][2]:7.1f} ms"
                                       for r in every))
    # --8<-- [end:timeline]
    if device.type == "cuda":  # what a GPU trace adds: kernels, on streams
        kernels = [e for e in events if e.get("cat") == "kernel"]
        nccl = {e["args"]["stream"] for e in kernels if "nccl" in e["name"].lower()}
        other = {e["args"]["stream"] for e in kernels} - nccl
        show(f"  kernels: NCCL's on {len(nccl)} stream(s), the others on {len(other)}")
        failed += [f"{case}: NCCL kernels"] if backend == "nccl" and not nccl else []

dist.destroy_process_group()
if failed:
    sys.exit(f"predicted != counted: {', '.join(failed)}")
